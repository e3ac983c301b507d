// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// scanTimeout bounds every wait for a condition: conditions are waited for
// by scanning again, never by sleeping.
const scanTimeout = 15 * time.Second

// fixture is a Scanner that, unless the test says otherwise, only looks at
// the processes the test started: other processes on the host (including
// other tests' publishers) can neither appear in events nor in Stats.
type fixture struct {
	t    testing.TB
	s    *scan.Scanner
	ours map[int]bool
}

func newFixture(t testing.TB, opt scan.Options) *fixture {
	t.Helper()
	testenv.RequireRoot(t) // process_vm_readv of any process needs CAP_SYS_PTRACE
	f := &fixture{t: t, ours: map[int]bool{}}
	if opt.Filter == nil {
		opt.Filter = func(pid int, _ string) bool { return f.ours[pid] }
	}
	if opt.RecheckMin == 0 {
		// Long enough that nothing is looked at again by chance during a
		// test: a retry is always the test's doing (Rescan).
		opt.RecheckMin, opt.RecheckMax = time.Hour, time.Hour
	}
	s, err := scan.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	f.s = s
	return f
}

// own marks PIDs as the test's: the default filter accepts them, and their
// events are the ones returned.
func (f *fixture) own(pids ...int) {
	for _, p := range pids {
		f.ours[p] = true
	}
}

// scan runs one Scan and returns the events of the test's PIDs.
func (f *fixture) scan() ([]publisher.Event, scan.Stats) {
	f.t.Helper()
	return f.mine("Scan", f.s.Scan)
}

// mine runs one Scan or Poll (called name) and returns the events of the
// test's PIDs.
func (f *fixture) mine(name string, run func() ([]publisher.Event, scan.Stats, error)) ([]publisher.Event, scan.Stats) {
	f.t.Helper()
	evs, st, err := run()
	if err != nil {
		f.t.Fatalf("%s: %v", name, err)
	}
	var mine []publisher.Event
	for _, e := range evs {
		if f.ours[e.Process.ID.PID] {
			mine = append(mine, e)
		}
	}
	return mine, st
}

// scanUntil scans until cond holds for one scan's events and stats, and
// returns the events of every scan it ran (in order) and the last stats.
func (f *fixture) scanUntil(what string, cond func([]publisher.Event, scan.Stats) bool) ([]publisher.Event, scan.Stats) {
	f.t.Helper()
	deadline := time.Now().Add(scanTimeout)
	var all []publisher.Event
	for n := 1; ; n++ {
		evs, st := f.scan()
		all = append(all, evs...)
		if cond(evs, st) {
			return all, st
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not seen after %d scans in %v; events: %s", what, n, scanTimeout, describe(all))
		}
	}
}

// waitEvent scans until an event of kind for pid arrives and returns it.
func (f *fixture) waitEvent(kind publisher.EventKind, pid int) (*publisher.Event, []publisher.Event) {
	f.t.Helper()
	var got *publisher.Event
	all, _ := f.scanUntil(fmt.Sprintf("%v for pid %d", kind, pid), func(evs []publisher.Event, _ scan.Stats) bool {
		got = findEvent(evs, kind, pid)
		return got != nil
	})
	return got, all
}

func findEvent(evs []publisher.Event, kind publisher.EventKind, pid int) *publisher.Event {
	for i := range evs {
		if evs[i].Kind == kind && evs[i].Process.ID.PID == pid {
			return &evs[i]
		}
	}
	return nil
}

func describe(evs []publisher.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "[%v pid %d start %d] ", e.Kind, e.Process.ID.PID, e.Process.ID.StartTicks)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// failures renders the non-zero failure counters of st.
func failures(st scan.Stats) map[scan.Reason]int {
	out := map[scan.Reason]int{}
	for _, r := range scan.Reasons() {
		if n := st.Failures[r]; n != 0 {
			out[r] = n
		}
	}
	return out
}

// startTicks reads field 22 of /proc/PID/stat independently of the scanner.
func startTicks(t testing.TB, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	v, err := strconv.ParseUint(fields[22-3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// mappingAt returns the /proc/PID/maps line that starts at addr.
func mappingAt(t testing.TB, pid int, addr uint64) procmaps.Mapping {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, err := procmaps.ParseLine(sc.Bytes())
		if err == nil && m.Start == addr {
			return m
		}
	}
	t.Fatalf("pid %d: no mapping at %#x", pid, addr)
	return procmaps.Mapping{}
}

// remoteHeader reads a publisher's header with process_vm_readv.
func remoteHeader(t testing.TB, pid int, addr uint64) processctx.Header {
	t.Helper()
	var b [processctx.HeaderSize]byte
	if err := (remote.Memory{PID: pid}).ReadAt(b[:], addr); err != nil {
		t.Fatal(err)
	}
	h, err := processctx.ParseHeader(b[:], processctx.DefaultMaxPayloadSize)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func attr(attrs []processctx.Attribute, key string) processctx.Value {
	v, _ := processctx.Lookup(attrs, key)
	return v
}

// idleProcesses starts n processes that never publish ("sleep infinity");
// they are killed when the test or benchmark ends.
func idleProcesses(tb testing.TB, n int) []*exec.Cmd {
	tb.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		testenv.Missing(tb, "sleep is not installed")
	}
	cmds := make([]*exec.Cmd, 0, n)
	tb.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for i := 0; i < n; i++ {
		c := exec.Command(sleep, "infinity")
		if err := c.Start(); err != nil {
			tb.Fatalf("starting idle process %d: %v", i, err)
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// exeName is the executable name the scanner reports for a binary.
func exeName(path string) string { return filepath.Base(path) }
