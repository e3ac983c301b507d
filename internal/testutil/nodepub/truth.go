// SPDX-License-Identifier: Apache-2.0

//go:build linux

package nodepub

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// ReadSwitchTruth reads a switch run's truth (CLOCK_MONOTONIC ns: Node has
// no CLOCK_BOOTTIME) as threadpub's, its times moved to CLOCK_BOOTTIME and
// CLOCK_REALTIME by the clocks' offsets now (equal to those of the run on a
// host that did not suspend meanwhile).
func ReadSwitchTruth(path string) (threadpub.SwitchTruth, error) {
	var t threadpub.SwitchTruth
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	toBoot, toReal := clockOffsets()
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 6 && f[0] == "span":
			idx, e1 := strconv.Atoi(f[1])
			start, e2 := strconv.ParseInt(f[4], 10, 64)
			end, e3 := strconv.ParseInt(f[5], 10, 64)
			if e1 != nil || e2 != nil || e3 != nil {
				return t, fmt.Errorf("%s: %q", path, line)
			}
			t.Spans = append(t.Spans, threadpub.Span{Index: idx, TraceID: f[2], SpanID: f[3],
				BootStart: uint64(start + toBoot), BootEnd: uint64(end + toBoot), RealStart: start + toReal, RealEnd: end + toReal})
		case len(f) == 2 && f[0] == "done":
			done, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return t, fmt.Errorf("%s: %q", path, line)
			}
			t.DoneBoot, t.DoneReal = uint64(done+toBoot), done+toReal
		default:
			return t, fmt.Errorf("%s: unexpected line %q", path, line)
		}
	}
	if t.DoneBoot == 0 {
		return t, fmt.Errorf("%s: run not finished", path)
	}
	return t, nil
}

// clockOffsets: CLOCK_BOOTTIME and CLOCK_REALTIME minus CLOCK_MONOTONIC.
func clockOffsets() (toBoot, toReal int64) {
	var mono, boot, real unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &real)
	return boot.Nano() - mono.Nano(), real.Nano() - mono.Nano()
}

// Context waits for pid's process context and returns its thread-local part.
func Context(t testing.TB, pid int) processctx.ThreadLocal {
	t.Helper()
	s, err := scan.New(scan.Options{ProcRoot: "/proc"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var p *publisher.Process
	testenv.Eventually(t, "the process context of the node publisher", func() bool {
		p, err = s.ReadPID(pid)
		return err == nil
	})
	return p.Context.ThreadLocal
}

// Snapshot reads pid's thread contexts the way otelctx threads does.
func Snapshot(t testing.TB, pid int, tl processctx.ThreadLocal) ([]threadread.Thread, threadread.Stats) {
	t.Helper()
	v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return tlsvar.Resolve("/proc", pid) })
	if err != nil {
		t.Fatal(err)
	}
	threads, st, err := threadread.Snapshot(pid, v, threadread.Options{KeyMap: tl.AttributeKeyMap, ProcRoot: "/proc"})
	if err != nil {
		t.Fatal(err)
	}
	return threads, st
}

// Settled is a snapshot in which every thread stopped: a busy host can
// keep one from stopping in time, and a thread not read cannot be judged.
func Settled(t testing.TB, pid int, tl processctx.ThreadLocal) []threadread.Thread {
	t.Helper()
	for attempt := 0; ; attempt++ {
		threads, st := Snapshot(t, pid, tl)
		if st.Reasons[threadread.ReasonTimeout] == 0 || attempt == 10 {
			return threads
		}
	}
}

// WorkerTID is the thread other than the main one whose variable the
// writer registered: the worker's (threads without an isolate leave it unset).
func WorkerTID(t testing.TB, pid int, tl processctx.ThreadLocal) int {
	t.Helper()
	tid := 0
	for _, th := range Settled(t, pid, tl) {
		if th.TID != pid && th.Reason != nodectx.ReasonNotRegistered && th.Reason != threadread.ReasonExited {
			if tid != 0 {
				t.Fatalf("threads %d and %d both look like the worker", tid, th.TID)
			}
			tid = th.TID
		}
	}
	if tid == 0 {
		t.Fatal("no worker thread with a registered variable")
	}
	return tid
}
