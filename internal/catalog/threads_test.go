package catalog

import (
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

func proc(pid int, start uint64) *scan.Process {
	return &scan.Process{ID: scan.ProcessID{PID: pid, StartTicks: start}}
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
	if n := c.UpdateThreads(7, []*ThreadRecord{rec(7, 8, 1, t0)}, nil); n != 0 || c.ThreadCount() != 0 {
		t.Fatalf("recorded for an unknown process: %d %d", n, c.ThreadCount())
	}
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(7, 1)}})
	c.UpdateThreads(7, []*ThreadRecord{rec(7, 8, 1, t0), rec(7, 9, 2, t0)}, nil)
	r, at, ok := c.Thread(7, 8)
	if !ok || r.Record.SpanID[0] != 1 || !at.Equal(t0) || r.Attributes["k"] != "v" {
		t.Fatalf("Thread(7,8) = %+v %v %v", r, at, ok)
	}
	// Next snapshot: 8 updated, 9 had no record any more, 10 unread keeps nothing.
	t1 := t0.Add(time.Second)
	c.UpdateThreads(7, []*ThreadRecord{rec(7, 8, 3, t1)}, []int{10})
	if r, at, _ := c.Thread(7, 8); r.Record.SpanID[0] != 3 || !at.Equal(t1) {
		t.Errorf("not the latest: %+v", r)
	}
	if _, _, ok := c.Thread(7, 9); ok {
		t.Error("thread 9 kept a record it no longer has")
	}
	// Unread threads keep their previous record.
	c.UpdateThreads(7, nil, []int{8})
	if r, _, ok := c.Thread(7, 8); !ok || r.Record.SpanID[0] != 3 {
		t.Error("unread thread lost its record")
	}
	// Lost process: its threads go.
	c.Apply([]scan.Event{{Kind: scan.Lost, Process: proc(7, 1)}})
	if _, _, ok := c.Thread(7, 8); ok || c.ThreadCount() != 0 {
		t.Errorf("threads of a lost process kept: %d", c.ThreadCount())
	}
	// PID reuse: a successor found under the same PID starts empty.
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(7, 1)}})
	c.UpdateThreads(7, []*ThreadRecord{rec(7, 8, 1, t0)}, nil)
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(7, 2)}})
	if c.ThreadCount() != 0 {
		t.Error("threads of a previous process with the same PID kept")
	}
}

func TestThreadsBounded(t *testing.T) {
	c := New()
	c.SetThreadLimits(3, 5)
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(1, 1)}, {Kind: scan.Found, Process: proc(2, 1)}})
	var rs []*ThreadRecord
	for tid := 10; tid < 15; tid++ {
		rs = append(rs, rec(1, tid, 1, time.Time{}))
	}
	if d := c.UpdateThreads(1, rs, nil); d != 2 || len(c.Threads(1)) != 3 {
		t.Fatalf("per-process bound: dropped %d, kept %d", d, len(c.Threads(1)))
	}
	if d := c.UpdateThreads(2, rs, nil); d != 3 || c.ThreadCount() != 5 {
		t.Fatalf("total bound: dropped %d, total %d", d, c.ThreadCount())
	}
	// Replacing a process's set frees its share of the total.
	c.UpdateThreads(1, nil, nil)
	if c.ThreadCount() != 2 {
		t.Fatalf("total after clearing: %d", c.ThreadCount())
	}
}

func TestThreadsConcurrentReads(t *testing.T) {
	c := New()
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(1, 1)}})
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
		c.UpdateThreads(1, []*ThreadRecord{rec(1, 5, byte(i), time.Time{})}, nil)
	}
	close(stop)
	wg.Wait()
}
