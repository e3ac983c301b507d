// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// tracefsDirs are where tracefs is looked for, at every attach: cilium/ebpf
// looks once per process and keeps the answer, so tracefs mounted after a
// first attempt would never count.
var tracefsDirs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// tracepointID is the ID of tracefs event group/name.
func tracepointID(group, name string) (uint64, error) {
	var errs []error
	for _, d := range tracefsDirs {
		b, err := os.ReadFile(filepath.Join(d, "events", group, name, "id"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("tracepoint %s/%s: bad id %q: %w", group, name, b, err)
		}
		return id, nil
	}
	return 0, fmt.Errorf("tracepoint %s/%s (tracefs not mounted?): %w", group, name, errors.Join(errs...))
}

// attachTracepoint runs prog at every hit of the tracepoint, on any CPU
// (one perf event on CPU 0 for all threads: a tracepoint event runs its
// program wherever the tracepoint fires). The link holds the perf event,
// whose fd is closed here; perf_event links need 5.15, as on_prctl_exit's
// bpf_task_pt_regs does.
func attachTracepoint(group, name string, prog *ebpf.Program) (link.Link, error) {
	id, err := tracepointID(group, name)
	if err != nil {
		return nil, err
	}
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      id,
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open(tracepoint %s/%s): %w", group, name, err)
	}
	defer unix.Close(fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
	if err != nil {
		return nil, fmt.Errorf("attaching to tracepoint %s/%s: %w", group, name, err)
	}
	return l, nil
}
