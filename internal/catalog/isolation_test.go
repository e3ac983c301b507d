// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

// exeProc is a process of an executable, created at created.
func exeProc(pid int, exe string, created time.Time) *publisher.Process {
	p := procAt(pid, created)
	p.ExecutablePath, p.ExecutableName = exe, exe[len(exe)-min(len(exe), 15):]
	return p
}

// spanChanges records n span changes of tid from t0, 1 ms apart.
func spanChanges(t *testing.T, c *Catalog, p *publisher.Process, tid, n int, t0 time.Time) {
	t.Helper()
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		if !c.ObserveFor(p.ID, tid, at, rec(p.ID.PID, tid, byte(1+i%2), at), false) {
			t.Fatalf("pid %d tid %d: observation %d refused", p.ID.PID, tid, i)
		}
	}
}

// At the default bounds, 64 publishers with 1,024 busy threads each (the
// whole thread bound, and past the entry bound) next to a quiet process:
// the quiet process keeps its whole history and still gets a new thread.
// Without shares the busy ones cut its history to a few entries.
func TestBusyNeighboursKeepQuietHistory(t *testing.T) {
	const busy, threads, changes, quietRuns = 64, DefaultMaxThreadsPerProcess, 6, 500
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	quiet := exeProc(1, "/usr/bin/quiet", now.Add(-time.Hour))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: quiet}})
	spanChanges(t, c, quiet, 10, quietRuns, now)
	spanChanges(t, c, quiet, 11, quietRuns, now)

	t0 := now.Add(time.Second)
	spans := []*ThreadRecord{rec(0, 0, 1, t0), rec(0, 0, 2, t0)} // shared: the catalog compares content
	for i := range busy {
		p := exeProc(1000+i, "/usr/bin/busy", now.Add(-time.Hour))
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		for tid := range threads {
			for k := range changes {
				c.ObserveFor(p.ID, 5000+tid, t0.Add(time.Duration(k*threads+tid)*time.Microsecond), spans[k%2], false)
			}
		}
	}
	if c.ThreadCount() < DefaultMaxThreads-64 || c.EntryCount() < DefaultMaxEntries-64 {
		t.Fatalf("the busy processes hold %d threads, %d entries: not at the bounds (%d, %d)",
			c.ThreadCount(), c.EntryCount(), DefaultMaxThreads, DefaultMaxEntries)
	}
	for _, tid := range []int{10, 11} {
		if n := len(c.History(1, tid)); n != quietRuns {
			t.Errorf("the quiet process's thread %d holds %d runs, want all %d", tid, n, quietRuns)
		}
	}
	late := t0.Add(time.Second)
	if !c.ObserveFor(quiet.ID, 12, late, rec(1, 12, 1, late), false) {
		t.Error("the quiet process's new thread was refused at the thread bound")
	}
	c.checkShares(t)
}

// At the default retention bound, publisher churn (twice the bound of
// short-lived processes of one executable, all within the retention)
// next to one retained exit of another executable: the churn gives up its
// own oldest exits, the other exit stays joinable with its history.
func TestChurnKeepsOthersRetainedExit(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	victim := exeProc(7, "/usr/bin/victim", now.Add(-time.Hour))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: victim}})
	spanChanges(t, c, victim, 8, 10, now)
	exit := now.Add(time.Second)
	now = exit
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: victim}})

	for i := range 2 * DefaultMaxRetained {
		now = now.Add(time.Millisecond)
		p := exeProc(10_000+i, "/usr/bin/churn", now.Add(-time.Millisecond))
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.ObserveFor(p.ID, p.ID.PID, now, rec(p.ID.PID, p.ID.PID, 1, now), false)
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	if c.RetainedCount() != DefaultMaxRetained {
		t.Fatalf("%d retained, want the bound %d", c.RetainedCount(), DefaultMaxRetained)
	}
	if p, how := c.ProcessAt(7, exit.Add(-time.Millisecond).UnixNano()); how != Found || p != victim {
		t.Fatalf("the victim's exit was evicted by another executable's churn: %v %v", p, how)
	}
	if n := len(c.History(7, 8)); n != 10 {
		t.Errorf("the victim's thread holds %d runs, want 10", n)
	}
	c.checkShares(t)
	// The churn lost its oldest exits, kept its newest.
	if _, how := c.ProcessAt(10_000, 0); how != NoProcess {
		t.Errorf("the churn's first exit: %v, want forgotten", how)
	}
	if _, how := c.ProcessAt(10_000+2*DefaultMaxRetained-1, now.Add(-time.Millisecond).UnixNano()); how != Found {
		t.Errorf("the churn's last exit: %v, want kept", how)
	}
}

// At the entry bound two processes end with equal shares: the newcomer
// takes entries from the bigger one until they hold as many, then
// overwrites its own oldest.
func TestEntrySharesEqualize(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetHistoryLimits(100, 20)
	a, b := exeProc(1, "/bin/a", now), exeProc(2, "/bin/b", now)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: a}, {Kind: publisher.Found, Process: b}})
	spanChanges(t, c, a, 10, 20, now)
	spanChanges(t, c, b, 20, 5, now.Add(time.Second))
	if na, nb := len(c.History(1, 10)), len(c.History(2, 20)); na != 15 || nb != 5 {
		t.Fatalf("after 5 of b's runs: a holds %d, b %d, want 15 and 5", na, nb)
	}
	spanChanges(t, c, b, 20, 50, now.Add(2*time.Second))
	if na, nb := len(c.History(1, 10)), len(c.History(2, 20)); na != 10 || nb != 10 {
		t.Errorf("after 50 more: a holds %d, b %d, want 10 and 10", na, nb)
	}
	// 10 runs taken from a, 44 of b's own overwritten at the bound (the
	// first of the 50 continues b's last run).
	if o := c.Occupancy(); o.Runs != 20 || o.MaxRuns != 20 || o.Threads != 2 || o.Processes != 2 || o.EvictedRuns != 10+44 || o.EvictedThreads != 0 {
		t.Errorf("occupancy %+v", o)
	}
	c.checkShares(t)
}

// At the retention bound the executable with the most exits gives up its
// oldest; among executables with as many, the oldest exit goes.
func TestRetainedPerExecutable(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(time.Hour, 4)
	exit := func(pid int, exe string) {
		now = now.Add(time.Second)
		p := exeProc(pid, exe, now.Add(-time.Minute))
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	exit(1, "/bin/a")
	exit(2, "/bin/b")
	exit(3, "/bin/b")
	exit(4, "/bin/c")
	exit(5, "/bin/c") // b and c hold 2: b's exit 2 is the oldest of theirs
	exit(6, "/bin/d") // c holds the most
	kept := func(pid int) bool { _, how := c.ProcessAt(pid, 0); return how != NoProcess }
	for pid, want := range map[int]bool{1: true, 2: false, 3: true, 4: false, 5: true, 6: true} {
		if kept(pid) != want {
			t.Errorf("pid %d kept %v, want %v", pid, kept(pid), want)
		}
	}
	if c.RetainedCount() != 4 || len(c.owners) != 1 || len(c.owners[0].origins) != 4 {
		t.Errorf("%d retained in %d owners, want 4 in 1", c.RetainedCount(), len(c.owners))
	}
	if o := c.Occupancy(); o.Retained != 4 || o.MaxRetained != 4 || o.EvictedRetained != 2 || o.Processes != 0 {
		t.Errorf("occupancy %+v", o)
	}
	now = now.Add(2 * time.Hour)
	c.Apply(nil)
	if c.RetainedCount() != 0 || len(c.owners) != 0 || c.byRetained.Len() != 0 {
		t.Errorf("after the retention: %d retained, %d owners", c.RetainedCount(), len(c.owners))
	}
}

// One user's exits under as many executable paths as it likes (copies,
// memfd) cannot evict another user's retained exit: the bound takes from
// the user holding the most.
func TestChurnUnderManyPathsKeepsOtherUsersExit(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(time.Hour, 64)
	exit := func(pid, uid int, exe string) {
		now = now.Add(time.Millisecond)
		p := exeProc(pid, exe, now.Add(-time.Minute))
		p.UID, p.Owner = uid, uid
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	exit(1, 1000, "/usr/bin/victim")
	for i := range 1000 {
		exit(100+i, 2000, fmt.Sprintf("/tmp/copy-%d", i))
	}
	if _, how := c.ProcessAt(1, 0); how == NoProcess {
		t.Error("the other user's exit was evicted")
	}
	if o := c.Occupancy(); o.Retained != 64 || o.EvictedRetained != 1000-63 {
		t.Errorf("occupancy %+v", o)
	}
	c.checkShares(t)
}

// Random writes from many processes at small bounds: the bounds hold and
// the shares' accounting matches what the histories hold.
func TestSharesAccounting(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetThreadLimits(8, 40)
	c.SetHistoryLimits(16, 120)
	c.SetRetention(time.Minute, 6)
	rnd := uint64(1)
	next := func(n int) int { rnd = rnd*6364136223846793005 + 1442695040888963407; return int(rnd>>33) % n }
	live := map[int]*publisher.Process{}
	for i := range 20_000 {
		now = now.Add(time.Millisecond)
		pid := 1 + next(12)
		p, ok := live[pid]
		switch {
		case !ok:
			p = exeProc(pid, []string{"/bin/a", "/bin/b", "/bin/c"}[next(3)], now)
			c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
			live[pid] = p
		case next(50) == 0:
			c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
			delete(live, pid)
		default:
			tid := next(12)
			c.ObserveFor(p.ID, tid, now, rec(pid, tid, byte(next(3)), now), false)
		}
		if i%97 == 0 {
			c.checkShares(t)
		}
	}
	c.checkShares(t)
}

// checkShares: the counts match the histories, the bounds hold, the
// rankings are heaps.
func (c *Catalog) checkShares(t *testing.T) {
	t.Helper()
	c.mu.RLock()
	defer c.mu.RUnlock()
	threads, entries := 0, 0
	for id, pt := range c.threads {
		n := 0
		for _, h := range pt.ths {
			n += h.len()
		}
		if n != pt.nEntries || pt.id != id || len(pt.ths) == 0 {
			t.Fatalf("%v: %d entries counted, %d held, %d threads", id, pt.nEntries, n, len(pt.ths))
		}
		if len(pt.ths) > c.maxPerProc {
			t.Fatalf("%v holds %d threads, bound %d", id, len(pt.ths), c.maxPerProc)
		}
		threads += len(pt.ths)
		entries += n
	}
	if threads != c.nThreads || entries != c.nEntries || c.nThreads > c.maxThreads || c.nEntries > c.maxEntries {
		t.Fatalf("%d threads (counted %d, bound %d), %d entries (counted %d, bound %d)",
			threads, c.nThreads, c.maxThreads, entries, c.nEntries, c.maxEntries)
	}
	if c.byThreads.Len() != len(c.threads) || c.byEntries.Len() != len(c.threads) {
		t.Fatalf("rankings of %d and %d for %d processes", c.byThreads.Len(), c.byEntries.Len(), len(c.threads))
	}
	retained := 0
	for _, u := range c.owners {
		n := 0
		for _, o := range u.origins {
			n += o.n
		}
		if n != u.n || u.byExe.Len() != len(u.origins) {
			t.Fatalf("uid %d: %d retained by executable, %d counted, %d ranked", u.uid, n, u.n, u.byExe.Len())
		}
		checkHeap(t, &u.byExe)
		retained += n
	}
	if retained != c.nExited || c.nExited > c.maxRetained || c.byRetained.Len() != len(c.owners) {
		t.Fatalf("%d retained by owner, %d counted, bound %d", retained, c.nExited, c.maxRetained)
	}
	checkHeap(t, &c.byThreads)
	checkHeap(t, &c.byEntries)
	checkHeap(t, &c.byRetained)
}

func checkHeap[T comparable](t *testing.T, r *ranking[T]) {
	t.Helper()
	for i := 1; i < r.Len(); i++ {
		if r.Less(i, (i-1)/2) || *r.slot(r.items[i]) != i {
			t.Fatalf("ranking out of order at %d", i)
		}
	}
}

// One user's publishers of the largest contexts (64 KiB decoded) exiting in
// numbers, under eight UIDs minted in its user namespace (one Owner), stay
// within the default retained memory (16 MiB, where the 4,096 exits the
// count allows hold 257 MiB) without evicting another user's retained
// exit. Before the memory bound: every exit kept, 257 MiB.
func TestRetainedMemoryBound(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	exit := func(pid, uid, owner, size int) {
		now = now.Add(time.Millisecond)
		p := exeProc(pid, "/usr/bin/pub", now.Add(-time.Minute))
		p.UID, p.Owner = uid, owner
		p.DecodeStats.DecodedSize = size
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	exit(1, 1000, 1000, 64<<10)
	for i := range DefaultMaxRetained {
		exit(100+i, 200000+i%8, 2000, 64<<10)
	}
	o := c.Occupancy()
	if o.RetainedMemory > DefaultMaxRetainedMemory || o.MaxRetainedMemory != DefaultMaxRetainedMemory {
		t.Errorf("retained exits hold %d bytes, bound %d; want at most %d", o.RetainedMemory, o.MaxRetainedMemory, DefaultMaxRetainedMemory)
	}
	if o.EvictedRetained == 0 || o.Retained >= DefaultMaxRetained {
		t.Errorf("occupancy %+v: want exits evicted for the memory bound", o)
	}
	if _, how := c.ProcessAt(1, 0); how == NoProcess {
		t.Error("the other user's exit was evicted")
	}
	c.checkShares(t)
	c.SetRetention(0, -1) // every exit forgotten: nothing left charged
	if o := c.Occupancy(); o.Retained != 0 || o.RetainedMemory != 0 {
		t.Errorf("after every exit expired: occupancy %+v", o)
	}
}
