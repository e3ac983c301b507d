// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

func proc(pid int, start uint64) *publisher.Process {
	return &publisher.Process{ID: publisher.ProcessID{PID: pid, StartTicks: start}}
}

func rec(pid, tid int, span byte, at time.Time) *ThreadRecord {
	r := &ThreadRecord{PID: pid, TID: tid, SeenAt: at, Attributes: map[string]string{"k": "v"}}
	r.Record.SpanID = threadctx.SpanID{span}
	return r
}

func TestThreadsLatestPerThread(t *testing.T) {
	c := New()
	t0 := time.Unix(100, 0)
	// Unknown process: nothing recorded.
	if n := c.updateThreadsPID(7, []*ThreadRecord{rec(7, 8, 1, t0)}, nil); n != 0 || c.ThreadCount() != 0 {
		t.Fatalf("recorded for an unknown process: %d %d", n, c.ThreadCount())
	}
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 1)}})
	c.updateThreadsPID(7, []*ThreadRecord{rec(7, 8, 1, t0), rec(7, 9, 2, t0)}, nil)
	r, at, ok := c.Thread(7, 8)
	if !ok || r.Record.SpanID[0] != 1 || !at.Equal(t0) || r.Attributes["k"] != "v" {
		t.Fatalf("Thread(7,8) = %+v %v %v", r, at, ok)
	}
	// Next snapshot: 8 updated, 9 had no record any more, 10 unread keeps nothing.
	t1 := t0.Add(time.Second)
	c.updateThreadsPID(7, []*ThreadRecord{rec(7, 8, 3, t1)}, []int{10})
	if r, at, _ := c.Thread(7, 8); r.Record.SpanID[0] != 3 || !at.Equal(t1) {
		t.Errorf("not the latest: %+v", r)
	}
	if _, _, ok := c.Thread(7, 9); ok {
		t.Error("thread 9 kept a record it no longer has")
	}
	// Unread threads keep their previous record.
	c.updateThreadsPID(7, nil, []int{8})
	if r, _, ok := c.Thread(7, 8); !ok || r.Record.SpanID[0] != 3 {
		t.Error("unread thread lost its record")
	}
	// Lost process: its threads stay for the retention, then go.
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: proc(7, 1)}})
	if _, _, ok := c.Thread(7, 8); !ok || c.RetainedCount() != 1 {
		t.Errorf("threads of a lost process not retained: %d", c.RetainedCount())
	}
	c.SetRetention(0, -1)
	if _, _, ok := c.Thread(7, 8); ok || c.ThreadCount() != 0 || c.RetainedCount() != 0 {
		t.Errorf("threads of a lost process kept past the retention: %d", c.ThreadCount())
	}
	// PID reuse: a successor found under the same PID starts empty.
	c.SetRetention(time.Minute, -1)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 1)}})
	c.updateThreadsPID(7, []*ThreadRecord{rec(7, 8, 1, t0)}, nil)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 2)}})
	if n := len(c.Threads(7)); n != 0 {
		t.Errorf("successor shows %d threads of a previous process with the same PID", n)
	}
}

// The per-process thread bound evicts the process's own least recently
// observed thread; the total bound is enforced on the process holding the
// most threads: a process never loses a thread to one holding fewer.
func TestThreadsBounded(t *testing.T) {
	c := New()
	c.SetThreadLimits(3, 5)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}, {Kind: publisher.Found, Process: proc(2, 1)}})
	t0 := time.Unix(100, 0)
	records := func(pid int) []*ThreadRecord {
		var rs []*ThreadRecord
		for tid := 10; tid < 15; tid++ {
			rs = append(rs, rec(pid, tid, 1, t0))
		}
		return rs
	}
	// Within one snapshot nothing is older than anything else: the extra
	// threads are dropped, not swapped for one another.
	if d := c.updateThreadsPID(1, records(1), nil); d != 2 || len(c.Threads(1)) != 3 {
		t.Fatalf("per-process bound: dropped %d, kept %d", d, len(c.Threads(1)))
	}
	// At the total bound process 2 takes a thread of process 1 while 1
	// holds more, then drops its own extras.
	if d := c.updateThreadsPID(2, records(2), nil); d != 2 || len(c.Threads(1)) != 2 || len(c.Threads(2)) != 3 || c.ThreadCount() != 5 {
		t.Fatalf("total bound: dropped %d, process 1 holds %d, process 2 %d, total %d",
			d, len(c.Threads(1)), len(c.Threads(2)), c.ThreadCount())
	}
	// A thread seen later evicts the thread of its process observed least
	// recently (threads exit without telling the sampler).
	t1 := t0.Add(time.Second)
	if !c.observePID(2, 10, t1, rec(2, 10, 2, t1)) || !c.observePID(2, 99, t1, rec(2, 99, 2, t1)) {
		t.Fatal("observation at a bound dropped instead of evicting the oldest thread")
	}
	if _, _, ok := c.Thread(2, 10); !ok {
		t.Error("the recently observed thread was evicted")
	}
	if _, _, ok := c.Thread(2, 99); !ok || len(c.Threads(2)) != 3 || c.ThreadCount() != 5 {
		t.Errorf("the new thread: %v; process 2 holds %d threads, total %d, want 3 and 5", ok, len(c.Threads(2)), c.ThreadCount())
	}
	// An observation not newer than every thread of its process is dropped.
	if c.observePID(2, 77, t0, rec(2, 77, 1, t0)) {
		t.Error("a thread let in without room")
	}
	// A new process at the total bound takes a thread of the process
	// holding the most.
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(3, 1)}})
	if !c.observePID(3, 1, t1, rec(3, 1, 1, t1)) || c.ThreadCount() != 5 || len(c.Threads(2)) != 2 || len(c.Threads(1)) != 2 {
		t.Errorf("new process at the total bound: %d threads, process 1 holds %d, process 2 %d",
			c.ThreadCount(), len(c.Threads(1)), len(c.Threads(2)))
	}
	// One of the biggest gives up its own thread rather than take one from
	// a smaller process.
	if !c.observePID(1, 50, t1, rec(1, 50, 1, t1)) || len(c.Threads(1)) != 2 || len(c.Threads(3)) != 1 {
		t.Errorf("a biggest process's new thread: process 1 holds %d, process 3 %d", len(c.Threads(1)), len(c.Threads(3)))
	}
	// Evicted: 1 of process 1 for process 2, 1 of 2 for its own thread 99,
	// 1 of 2 for process 3, 1 of 1 for its own; refused: 2 + 2 + 1.
	if o := c.Occupancy(); o.Threads != 5 || o.MaxThreads != 5 || o.EvictedThreads != 4 || o.EvictedRuns != 4 || o.RefusedThreads != 5 {
		t.Errorf("occupancy %+v", o)
	}
}

func TestThreadAtHistory(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// A: 0..20 ms (three samples, one entry), none at 30, B at 40 and 50.
	for _, o := range []struct {
		ms   int
		span byte
	}{{0, 1}, {10, 1}, {20, 1}, {30, 0}, {40, 2}, {50, 2}} {
		var r *ThreadRecord
		if o.span != 0 {
			r = rec(1, 5, o.span, at(o.ms))
		}
		if !c.observePID(1, 5, at(o.ms), r) {
			t.Fatalf("observation at %d ms dropped", o.ms)
		}
	}
	if h := c.History(1, 5); len(h) != 3 || !h[0].First.Equal(at(0)) || !h[0].Last.Equal(at(20)) || h[1].Record != nil {
		t.Fatalf("history %+v", h)
	}
	for _, q := range []struct {
		ms     int
		ok     bool
		span   byte // 0: no record
		seenMs int
	}{
		{-1, false, 0, 0},
		{0, true, 1, 0},
		{5, true, 1, 0}, // inside a run: vouched for by its first observation
		{25, true, 1, 20},
		{30, true, 0, 30},
		{39, true, 0, 30},
		{40, true, 2, 40},
		{1000, true, 2, 50},
	} {
		r, seen, ok := c.ThreadAt(1, 5, at(q.ms))
		switch {
		case ok != q.ok:
			t.Errorf("ThreadAt(%d ms): ok=%v", q.ms, ok)
		case !ok:
		case q.span == 0 && r != nil, q.span != 0 && (r == nil || r.Record.SpanID[0] != q.span):
			t.Errorf("ThreadAt(%d ms) = %+v, want span %d", q.ms, r, q.span)
		case !seen.Equal(at(q.seenMs)):
			t.Errorf("ThreadAt(%d ms) seen at %v, want %d ms", q.ms, seen.Sub(t0), q.seenMs)
		}
	}
	// The latest-record API agrees with the history.
	if r, seen, ok := c.Thread(1, 5); !ok || r.Record.SpanID[0] != 2 || !seen.Equal(at(50)) {
		t.Errorf("Thread = %+v %v %v", r, seen, ok)
	}
	// Older than the latest observation: dropped, the history moves forward only.
	if c.observePID(1, 5, at(45), rec(1, 5, 9, at(45))) {
		t.Error("out-of-order observation accepted")
	}
	// Unknown threads, unknown processes.
	if _, _, ok := c.ThreadAt(1, 6, at(40)); ok {
		t.Error("unknown thread answered")
	}
	if c.observePID(2, 5, at(60), rec(2, 5, 1, at(60))) {
		t.Error("observation of a process not in the catalog accepted")
	}
	// A first observation without a record keeps nothing (unknown = no span).
	c.observePID(1, 7, at(60), nil)
	if c.ThreadCount() != 1 {
		t.Errorf("thread count %d", c.ThreadCount())
	}
}

// Ptrace snapshots go into the same history: a thread missing from a
// snapshot had no record then.
func TestThreadAtSnapshots(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	t1, t2 := t0.Add(10*time.Second), t0.Add(20*time.Second)
	c.updateThreadsPIDAt(1, t0, []*ThreadRecord{rec(1, 5, 1, t0), rec(1, 6, 1, t0)}, nil)
	c.updateThreadsPIDAt(1, t1, []*ThreadRecord{rec(1, 5, 2, t1)}, []int{6}) // 6 unread: not observed
	c.updateThreadsPIDAt(1, t2, nil, nil)
	check := func(tid int, when time.Time, span byte) {
		t.Helper()
		r, _, ok := c.ThreadAt(1, tid, when)
		if !ok || (span == 0) != (r == nil) || (r != nil && r.Record.SpanID[0] != span) {
			t.Errorf("ThreadAt(%d, %v) = %+v %v, want span %d", tid, when.Sub(t0), r, ok, span)
		}
	}
	check(5, t0, 1)
	check(5, t1.Add(time.Second), 2)
	check(5, t2, 0)
	check(6, t1.Add(time.Second), 1) // unread at t1: still the t0 record
	check(6, t2, 0)
}

func TestHistoryBounds(t *testing.T) {
	c := New()
	c.SetHistoryLimits(4, 10)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	for i := range 20 { // alternating records: one entry each
		c.observePID(1, 5, at(i), rec(1, 5, byte(1+i%2), at(i)))
	}
	h := c.History(1, 5)
	if len(h) != 4 || !h[0].First.Equal(at(16)) || !h[3].First.Equal(at(19)) {
		t.Fatalf("ring of 4 after 20: %d entries, first at %v", len(h), h[0].First.Sub(t0))
	}
	if _, _, ok := c.ThreadAt(1, 5, at(15)); ok {
		t.Error("an evicted observation answered")
	}
	if r, _, _ := c.ThreadAt(1, 5, at(17)); r.Record.SpanID[0] != 2 {
		t.Errorf("ThreadAt(17) = %+v", r)
	}
	// The total: three more threads with 4 entries each would be 16 > 10.
	for tid := 6; tid < 9; tid++ {
		for i := range 4 {
			c.observePID(1, tid, at(100+i), rec(1, tid, byte(1+i%2), at(100+i)))
		}
	}
	if n := c.EntryCount(); n > 10 {
		t.Errorf("%d entries held, bound 10", n)
	}
	// A lower depth applies as threads are observed.
	// At the entry bound the entries spread: thread 8, last to come, grew
	// at the others' expense instead of staying at one entry.
	if h := c.History(1, 8); len(h) < 2 {
		t.Errorf("thread 8 holds %d entries at the total bound", len(h))
	}
	if c.ThreadCount() != 4 {
		t.Errorf("%d threads, want 4 (the entry bound sheds entries, not threads)", c.ThreadCount())
	}
	c.SetHistoryLimits(2, 0)
	c.observePID(1, 8, at(200), rec(1, 8, 7, at(200)))
	if h := c.History(1, 8); len(h) > 2 || h[len(h)-1].Record.Record.SpanID[0] != 7 {
		t.Errorf("after lowering the depth: %+v", h)
	}
	// Removal with the process, once its retention is over, gives every
	// entry back.
	c.SetRetention(0, -1)
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: proc(1, 1)}})
	if c.EntryCount() != 0 || c.ThreadCount() != 0 {
		t.Errorf("after loss: %d entries, %d threads", c.EntryCount(), c.ThreadCount())
	}
}

func TestThreadAtConcurrent(t *testing.T) {
	c := New()
	c.SetHistoryLimits(8, 0)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := t0.Add(time.Duration(i%2000) * time.Millisecond)
				if r, seen, ok := c.ThreadAt(1, 5+g%2, q); ok && (seen.After(q) || (r != nil && r.TID != 5+g%2)) {
					t.Errorf("ThreadAt(%v) = %+v seen %v", q, r, seen)
					return
				}
			}
		}()
	}
	for i := range 2000 {
		when := t0.Add(time.Duration(i) * time.Millisecond)
		c.observePID(1, 5, when, rec(1, 5, byte(i/3), when))
		c.updateThreadsPIDAt(1, when, []*ThreadRecord{rec(1, 6, byte(i/5), when)}, []int{5})
	}
	close(stop)
	wg.Wait()
}

func TestThreadsConcurrentReads(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					if r, _, ok := c.Thread(1, 5); ok && r.TID != 5 {
						t.Error("wrong record")
					}
				}
			}
		}()
	}
	for i := range 1000 {
		c.updateThreadsPID(1, []*ThreadRecord{rec(1, 5, byte(i), time.Time{})}, nil)
	}
	close(stop)
	wg.Wait()
}

// BenchmarkThreadAt: one lookup in a full history (64 entries) of one of
// 1,000 threads, what a processor pays per profile sample.
func BenchmarkThreadAt(b *testing.B) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	for tid := range 1000 {
		for i := range 64 {
			when := t0.Add(time.Duration(i) * 10 * time.Millisecond)
			c.observePID(1, tid, when, rec(1, tid, byte(i), when))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		q := t0.Add(time.Duration(i%640) * time.Millisecond)
		if _, _, ok := c.ThreadAt(1, i%1000, q); !ok {
			b.Fatal("miss")
		}
	}
}

// BenchmarkObserve: recording one sample (the sampler's path), alternating
// records so that every call appends.
func BenchmarkObserve(b *testing.B) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(1000, 0)
	recs := []*ThreadRecord{rec(1, 5, 1, t0), rec(1, 5, 2, t0)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.observePID(1, 5+i%100, t0.Add(time.Duration(i)), recs[(i/100)%2])
	}
}

// With one thread per process, a new thread evicts the process's only one.
func TestThreadsBoundOne(t *testing.T) {
	c := New()
	c.SetThreadLimits(1, 0)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(1, 1)}})
	t0 := time.Unix(100, 0)
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		if !c.observePID(1, 10+i, at, rec(1, 10+i, 1, at)) {
			t.Fatalf("thread %d refused", 10+i)
		}
		if _, _, ok := c.Thread(1, 10+i); !ok || c.ThreadCount() != 1 || c.EntryCount() != 1 {
			t.Fatalf("thread %d: ok=%v, %d threads, %d entries", 10+i, ok, c.ThreadCount(), c.EntryCount())
		}
	}
}

// Writes for a process identity are refused once the PID belongs to
// another process: a slow snapshot or a late sample of the previous owner
// never lands on its successor.
func TestWritesForIdentity(t *testing.T) {
	c := New()
	old := &publisher.Process{ID: publisher.ProcessID{PID: 7, StartTicks: 100}}
	successor := &publisher.Process{ID: publisher.ProcessID{PID: 7, StartTicks: 200}}
	t0 := time.Unix(1000, 0)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: old}})
	if !c.ObserveFor(old.ID, 8, t0, rec(7, 8, 1, t0), false) {
		t.Fatal("write for the current identity refused")
	}
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: old}, {Kind: publisher.Found, Process: successor}})
	t1 := t0.Add(time.Second)
	if c.ObserveFor(old.ID, 9, t1, rec(7, 9, 2, t1), false) {
		t.Fatal("a sample of the previous owner was written on the successor")
	}
	if _, ok := c.UpdateThreadsFor(old.ID, t1, []*ThreadRecord{rec(7, 10, 3, t1)}, nil); ok {
		t.Fatal("a snapshot of the previous owner was written on the successor")
	}
	if n := len(c.Threads(7)); n != 0 {
		t.Fatalf("successor has %d threads from its predecessor", n)
	}
	if !c.ObserveFor(successor.ID, 9, t1, rec(7, 9, 4, t1), false) {
		t.Fatal("write for the successor refused")
	}
	if _, ok := c.UpdateThreadsFor(successor.ID, t1, []*ThreadRecord{rec(7, 10, 5, t1)}, nil); !ok {
		t.Fatal("snapshot for the successor refused")
	}
}
