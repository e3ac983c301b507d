// SPDX-License-Identifier: Apache-2.0

//go:build linux

package attribution

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

func identity(t *testing.T, pid int) publisher.ProcessID {
	t.Helper()
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	return publisher.ProcessID{PID: pid, StartTicks: ticks}
}

// TestDDNamespacedSlots: a writer in its own PID namespace indexes its
// slots by its namespace TIDs (Sample.SlotTID), which differ in slot from
// the TIDs listed here at this capacity: each worker's slot is attributed
// to it; a thread in neither listing collides with a worker by the
// worker's namespace slot, not by its TID here.
func TestDDNamespacedSlots(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 3})
	capacity := int(w.Capacity)
	p, r, _ := newTest(t, Config{ID: identity(t, w.PID), Buffer: ddBuffer(w.Buf, w.Capacity)})
	nsTaken := map[int]bool{w.NSPID % capacity: true}
	for i, wt := range w.Threads {
		nsTaken[wt.NSTID%capacity] = true
		p.Add(sampler.Sample{PID: w.PID, TID: wt.TID, SlotTID: wt.NSTID, Read: sampler.ReadBufferSlot,
			Slot: ddotel.Slot{TraceIDLow: uint64(0x500 + i), SpanID: uint64(0x600 + i)}})
	}
	// A thread that lived between the listings (its TID here unlisted):
	// in worker 0's namespace slot it collides; in a free namespace slot
	// whose index here is worker 0's, it does not.
	w0 := w.Threads[0]
	unlisted := w0.TID + 64*capacity
	free := -1
	for i := range capacity {
		if !nsTaken[i] {
			free = i
			break
		}
	}
	if free < 0 {
		t.Fatalf("no free slot among %d", capacity)
	}
	p.Add(sampler.Sample{PID: w.PID, TID: unlisted, SlotTID: w0.NSTID + capacity, Read: sampler.ReadBufferSlot, Slot: ddotel.Slot{TraceIDLow: 1, SpanID: 1}})
	p.Add(sampler.Sample{PID: w.PID, TID: unlisted + capacity, SlotTID: free + 5*capacity, Read: sampler.ReadBufferSlot, Slot: ddotel.Slot{TraceIDLow: 1, SpanID: 2}})
	p.Flush()
	if len(r.obs) != len(w.Threads)+2 {
		t.Fatalf("%d observations: %+v", len(r.obs), r.obs)
	}
	for i, o := range r.obs[:len(w.Threads)] {
		if o.Record == nil || o.TID != w.Threads[i].TID || o.Record.Record.SpanID.String() != "000000000000060"+string(rune('0'+i)) {
			t.Errorf("worker %d (tid %d, %d there, capacity %d): %+v", i, w.Threads[i].TID, w.Threads[i].NSTID, capacity, o)
		}
	}
	if o := r.obs[len(w.Threads)]; o.Reason != threadread.ReasonCollision {
		t.Errorf("a thread in worker 0's namespace slot: %+v", o)
	}
	if o := r.obs[len(w.Threads)+1]; o.Record == nil {
		t.Errorf("a thread alone in its namespace slot: %+v", o)
	}
}

// TestRealSamplerDD: the real eBPF sampler reading a real DD_OTEL_CTX
// writer's slots: a busy thread alone in its slot is observed with its
// record, two busy threads sharing a slot are only ever refused.
func TestRealSamplerDD(t *testing.T) {
	samplertest.Require(t)
	w, busy, pair, mate := busyAndPair(t)
	for _, i := range []int{0, 1, mate.Index} {
		w.Busy(i)
	}

	var mu sync.Mutex
	var obs []Observation
	seen := make(chan struct{})
	var got [3]bool // a record of busy, a refusal of each of pair
	id := identity(t, w.PID)
	buf := ddBuffer(w.Buf, w.Capacity)
	p, err := NewProcess(Config{ID: id, Buffer: buf, Observe: func(_ publisher.ProcessID, o Observation) {
		mu.Lock()
		defer mu.Unlock()
		obs = append(obs, o)
		if got == [3]bool{true, true, true} {
			return
		}
		got[0] = got[0] || o.TID == busy && o.Record != nil
		got[1] = got[1] || o.TID == pair[0] && o.Refused()
		got[2] = got[2] || o.TID == pair[1] && o.Refused()
		if got == [3]bool{true, true, true} {
			close(seen)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TrackTarget(sampler.Target{PID: w.PID, StartTicks: id.StartTicks, Buffer: buf}); err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- s.Run(p.Add, nil) }()
	tick := time.NewTicker(DefaultListEvery)
	timeout := time.After(20 * time.Second)
wait:
	for {
		select {
		case <-seen:
			break wait
		case <-tick.C:
			p.Tick() // held samples of threads that stopped being sampled
		case <-timeout:
			t.Error("no record of the busy thread, or no refusal of each of the pair, in 20 s at 997 Hz")
			break wait
		}
	}
	tick.Stop()
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if err := <-ran; err != nil {
		t.Error(err)
	}
	p.Finish()
	mu.Lock()
	defer mu.Unlock()
	for _, o := range obs {
		switch o.TID {
		case busy:
			if o.Record == nil || o.Record.Record.SpanID.String() != "b7ad6b7169203331" {
				t.Errorf("busy thread: %+v", o)
			}
		case pair[0], pair[1]:
			if o.Record != nil || !o.Refused() || o.Reason != threadread.ReasonCollision {
				t.Errorf("a thread sharing its slot: %+v", o)
			}
		}
	}
}
