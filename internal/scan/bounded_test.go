// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// openFDs counts this process's open file descriptors but sockets: the
// reader helper's connections come and go with remote's workers.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			continue
		}
		n++
	}
	return n
}

// startReaderHelper has remote start its reader helper (a child, whose
// pidfd os/exec holds) before a count of descriptors.
func startReaderHelper(t *testing.T) {
	t.Helper()
	var word uint64 = 1
	if _, err := (remote.Memory{PID: os.Getpid()}).ReadUint64(uint64(uintptr(unsafe.Pointer(&word)))); err != nil {
		t.Fatal(err)
	}
}

// TestNoFDPerCandidate: processes that do not publish cost the scanner no
// file descriptor, however many it examined; a tracked publisher costs
// two (its pidfd, and its pagemap for the safe stamp read), given back
// when it is lost. The count is taken after
// the children started: os/exec holds a pidfd per child in this process.
func TestNoFDPerCandidate(t *testing.T) {
	const n = 200
	f := newFixture(t, scan.Options{})
	p := testpub.Start(t, testpub.Glibc)
	p.Set("service.name", "fd-count")
	p.Publish()
	f.own(p.PID)
	for _, c := range idleProcesses(t, n) {
		f.own(c.Process.Pid)
	}
	startReaderHelper(t)
	before := openFDs(t)
	evs, st := f.scan()
	if findEvent(evs, publisher.Found, p.PID) == nil || st.ProcessesScanned != n+1 {
		t.Fatalf("first scan: events %s, %d processes examined, want %d", describe(evs), st.ProcessesScanned, n+1)
	}
	if got := openFDs(t); got != before+2 {
		t.Fatalf("%d fds open before the scan, %d after it: want two more (the publisher's pidfd and pagemap), whatever the %d candidates", before, got, n)
	}
	if _, st := f.scan(); st.ProcessesScanned != 0 || openFDs(t) != before+2 {
		t.Fatalf("second scan: %d examined, %d fds (want %d: the pidfd and the pagemap)", st.ProcessesScanned, openFDs(t), before+2)
	}
	// Unpublished, the publisher is a candidate again: no fd. (It is not
	// made to exit: this process holds fds of its own for its children.)
	p.Do("drop")
	f.waitEvent(publisher.Lost, p.PID)
	if got := openFDs(t); got != before {
		t.Fatalf("after the Lost, %d fds open, want %d", got, before)
	}
}

// TestPollPIDsOnlyNamed: PollPIDs reads the named publisher and nothing
// else: the others' updates and exits wait for the next Poll.
func TestPollPIDsOnlyNamed(t *testing.T) {
	f := newFixture(t, scan.Options{})
	pubs := make([]*testpub.Publisher, 3)
	for i := range pubs {
		pubs[i] = testpub.Start(t, testpub.Glibc)
		pubs[i].Set("service.name", "named-"+strconv.Itoa(i))
		pubs[i].Publish()
		f.own(pubs[i].PID)
	}
	idle := idleProcesses(t, 1)[0].Process.Pid
	f.own(idle)
	if evs, _ := f.scan(); len(evs) != len(pubs) {
		t.Fatalf("first scan: %s", describe(evs))
	}
	a, b, c := pubs[0], pubs[1], pubs[2]
	for _, p := range pubs[:2] {
		p.Set("service.version", "2")
		p.Publish()
	}
	c.Exit()

	evs, st := f.mine("PollPIDs", func() ([]publisher.Event, scan.Stats, error) { return f.s.PollPIDs(a.PID, a.PID) })
	if len(evs) != 1 || findEvent(evs, publisher.Updated, a.PID) == nil {
		t.Fatalf("PollPIDs(a): events %s, want a's Updated alone", describe(evs))
	}
	if st.Polled != 1 || st.ProcessesScanned != 0 || st.ContextsTracked != 3 {
		t.Fatalf("PollPIDs(a): %d polled, %d examined, %d tracked; want 1, 0, 3", st.Polled, st.ProcessesScanned, st.ContextsTracked)
	}
	// An untracked process named: its maps, nothing else.
	evs, st = f.mine("PollPIDs", func() ([]publisher.Event, scan.Stats, error) { return f.s.PollPIDs(idle) })
	if len(evs) != 0 || st.Polled != 0 || st.ProcessesScanned != 1 {
		t.Fatalf("PollPIDs(idle): events %s, %d polled, %d examined; want none, 0, 1", describe(evs), st.Polled, st.ProcessesScanned)
	}
	// The safety net sees the rest.
	evs, st = f.mine("Poll", f.s.Poll)
	if findEvent(evs, publisher.Updated, b.PID) == nil || findEvent(evs, publisher.Lost, c.PID) == nil || len(evs) != 2 {
		t.Fatalf("Poll: events %s, want b's Updated and c's Lost", describe(evs))
	}
	if st.ContextsTracked != 2 {
		t.Fatalf("Poll: %d tracked, want 2", st.ContextsTracked)
	}
	// A named publisher that exited is lost by its own pidfd.
	a.Exit()
	evs, _ = f.mine("PollPIDs", func() ([]publisher.Event, scan.Stats, error) { return f.s.PollPIDs(a.PID) })
	if len(evs) != 1 || findEvent(evs, publisher.Lost, a.PID) == nil {
		t.Fatalf("PollPIDs(exited a): events %s", describe(evs))
	}
}

// TestCandidateReusedPID: a process that did not publish is held in
// backoff (an hour here) without a pidfd; when its PID goes to a new
// process, the new one is looked at at once: found by the next listing
// (its /proc inode changed) or by PollPIDs (its start time changed), with
// its own identity. The same holds for a PID the filter excluded.
func TestCandidateReusedPID(t *testing.T) {
	exe := testpub.Build(t, testpub.Glibc)
	for _, tc := range []struct {
		name     string
		filtered bool // the first process is excluded by the filter
		named    bool // the successor is looked at through PollPIDs
	}{
		{"listing", false, false},
		{"PollPIDs", false, true},
		{"filtered/listing", true, false},
		{"filtered/PollPIDs", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *fixture
			opt := scan.Options{}
			if tc.filtered {
				// The idle process (sleep) is excluded by name, the
				// publisher accepted.
				opt.Filter = func(pid int, name string) bool { return f.ours[pid] && name == exeName(exe) }
			}
			f = newFixture(t, opt)
			old := idleProcesses(t, 1)[0]
			pid := old.Process.Pid
			f.own(pid)
			if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != boolInt(!tc.filtered) {
				t.Fatalf("first scan: events %s, %d examined", describe(evs), st.ProcessesScanned)
			}
			oldTicks := startTicks(t, pid)
			if err := old.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = old.Wait()
			waitTicksAfter(t, oldTicks)
			var q *testpub.Publisher
			testpub.ClaimPID(t, pid, func() (int, func()) {
				q = testpub.StartBinary(t, exe)
				return q.PID, q.Kill
			})
			q.Set("service.name", "successor")
			q.Publish()

			round := f.s.Scan
			if tc.named {
				round = func() ([]publisher.Event, scan.Stats, error) { return f.s.PollPIDs(pid) }
			}
			evs, st := f.mine("round", round)
			e := findEvent(evs, publisher.Found, pid)
			if e == nil || st.ProcessesScanned != 1 {
				t.Fatalf("after the PID was reused: events %s, %d examined; want the successor Found", describe(evs), st.ProcessesScanned)
			}
			if want := (publisher.ProcessID{PID: pid, StartTicks: startTicks(t, pid)}); e.Process.ID != want || e.Process.ID.StartTicks == oldTicks {
				t.Fatalf("successor found as %+v, want %+v (predecessor started at %d)", e.Process.ID, want, oldTicks)
			}
			if v := attr(e.Process.Context.Resource.Attributes, "service.name"); v.Str != "successor" {
				t.Fatalf("service.name = %q", v.Str)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAtLimitNoRecheck: while MaxProcesses are tracked, a refused
// publisher's due rechecks cost nothing (no maps parsed, no context read,
// no failure counted again); once a slot frees, its next recheck finds it.
func TestAtLimitNoRecheck(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	f := newFixture(t, scan.Options{MaxProcesses: 1, RecheckMin: time.Second, RecheckMax: time.Second, Now: clock})
	a, b := testpub.Start(t, testpub.Glibc), testpub.Start(t, testpub.Glibc)
	f.own(a.PID, b.PID)
	a.Publish()
	b.Publish()
	evs, st := f.scan()
	if len(evs) != 1 || st.ProcessesScanned != 2 || st.Failures[scan.ReasonProcessLimit] != 1 {
		t.Fatalf("first scan: events %s, stats %+v", describe(evs), st)
	}
	kept, other := a, b
	if evs[0].Process.ID.PID == b.PID {
		kept, other = b, a
	}
	for i := 0; i < 3; i++ {
		now = now.Add(time.Minute) // every recheck due
		if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != 0 || len(failures(st)) != 0 {
			t.Fatalf("at the limit, scan %d: events %s, stats %+v", i, describe(evs), st)
		}
	}
	kept.Exit()
	f.waitEvent(publisher.Lost, kept.PID)
	now = now.Add(time.Minute)
	evs, st = f.scan()
	if findEvent(evs, publisher.Found, other.PID) == nil || st.ProcessesScanned != 1 {
		t.Fatalf("after a slot freed: events %s, stats %+v", describe(evs), st)
	}
}
