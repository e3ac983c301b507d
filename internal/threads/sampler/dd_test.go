// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"fmt"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
)

// ddTarget is the DD-only target of a running ddwriter.
func ddTarget(t *testing.T, w *ddwriter.Writer) Target {
	t.Helper()
	ticks, err := procstat.StartTicks("/proc", w.PID)
	if err != nil {
		t.Fatal(err)
	}
	return Target{PID: w.PID, StartTicks: ticks, Buffer: ddBuffer(w.Buf, w.Capacity)}
}

// ddBuffer is a DD_OTEL_CTX buffer as discovery finds it.
func ddBuffer(addr uint64, capacity uint32) *publisher.Buffer {
	return &publisher.Buffer{Schema: ddring.Schema.Name(), Addr: addr, Capacity: capacity}
}

// ddRefused is the kernel's count of DD slot reads refused for reason.
func ddRefused(st Stats, reason string) uint64 {
	return st.Refused[Refusal{schema.ReadDDSlot, reason}]
}

// ddSamples returns the DD samples of tid taken after boot ns since.
func (c *collector) ddSamples(tid int, since uint64) []Sample {
	var out []Sample
	for _, s := range c.matching(tid, since) {
		if s.Read == ReadBufferSlot {
			out = append(out, s)
		}
	}
	return out
}

// trackDD tracks the DD-only target of w and returns the stats before
// and the boot time from which its samples count.
func trackDD(t *testing.T, s *Sampler, w *ddwriter.Writer) (before Stats, since uint64) {
	t.Helper()
	if err := s.TrackTarget(ddTarget(t, w)); err != nil {
		t.Fatal(err)
	}
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return before, bootNow(t)
}

// waitStats polls the kernel counters until cond holds (at most timeout).
// The counters are map values the kernel bumps: there is no event to wait
// on, so this polls, as briefly as the condition allows.
func waitStats(t *testing.T, s *Sampler, timeout time.Duration, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel counters %+v: condition not met within %v", st, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel: nothing to wait on
	}
}

// A busy worker's slot is read from its own TID: the sampler emits exactly
// the context it wrote, and each thread gets its own.
func TestDDSlotOfSampledThread(t *testing.T) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 64, Threads: 2})
	// Two workers in different slots: while the second shares the first's
	// (1 in 64), it exits and another starts.
	second := w.Threads[1]
	for tries := 0; ddotel.Colliding([]int{w.Threads[0].TID, second.TID}, w.Capacity)[second.TID]; tries++ {
		if tries == 64 {
			t.Fatal("no second worker outside the first's slot after 64 starts")
		}
		w.Exit(second.Index)
		second = w.Spawn()
	}
	workers := []int{0, second.Index}
	tids := []int{w.Threads[0].TID, second.TID}
	want := []ddotel.Slot{
		{TraceIDHigh: 0x0102030405060708, TraceIDLow: 0x1112131415161718, SpanID: 0x2122232425262728},
		{TraceIDHigh: 0, TraceIDLow: 0xabcdef, SpanID: 0x77},
	}
	for i, v := range want {
		w.Set(workers[i], v.TraceIDHigh, v.TraceIDLow, v.SpanID)
	}
	if err := s.TrackTarget(ddTarget(t, w)); err != nil {
		t.Fatal(err)
	}
	since := bootNow(t)
	w.Busy(workers[0])
	w.Busy(workers[1])
	if !c.waitFor(20*time.Second, func() bool {
		n0, n1 := 0, 0
		for _, smp := range c.samples {
			if smp.BootNs > since && smp.Read == ReadBufferSlot {
				switch smp.TID {
				case tids[0]:
					n0++
				case tids[1]:
					n1++
				}
			}
		}
		return n0 >= 10 && n1 >= 10
	}) {
		t.Fatal("not 10 DD samples of each busy worker within 20 s")
	}
	w.Idle(workers[0])
	w.Idle(workers[1])
	for i, tid := range tids {
		got := c.ddSamples(tid, since)
		for _, smp := range got {
			if smp.PID != w.PID || smp.Slot != want[i] || smp.Record != nil || smp.OffCPU {
				t.Fatalf("worker %d (tid %d): sample %+v, want slot %+v", i, tid, smp, want[i])
			}
		}
		t.Logf("worker %d (tid %d): %d DD samples, all %+v", i, tid, len(got), want[i])
	}
	c.mu.Lock()
	for _, smp := range c.samples {
		if smp.Read != ReadBufferSlot {
			t.Errorf("a DD-only target gave a %v sample: %+v", smp.Read, smp)
		}
	}
	c.mu.Unlock()
	r := want[0].Record()
	if got := r.TraceID.String() + "/" + r.SpanID.String(); got != "01020304050607081112131415161718/2122232425262728" {
		t.Errorf("W3C ids %s", got)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
}

// While every worker rewrites its slot in a tight loop, no torn slot is
// emitted for a thread alone in its slot: every DD sample of such a worker
// is one whole value it wrote (it is interrupted, so its own writes cannot
// progress), and writes it was interrupted in are counted as busy. A worker
// whose tid collides with another's can be given the other's values, and
// even a mix of two writes: the other writer runs on another CPU, and the
// writer's protocol (in_use, fields, in_use; no sequence number) cannot
// reveal a write that stalls between the reader's checks. The kernel cannot
// know which thread owns a shared slot; callers never attribute one
// (ddotel.Colliding), so such values are counted here, not refused.
// A storm starved of samples (the host's other work) is run again.
func TestDDStormNoTornSlots(t *testing.T) {
	testenv.MeasureFloors(t, ddStorm)
}

func ddStorm(t *testing.T) (misses []string) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 3})
	// One more worker sharing worker 0's slot: the two write the same slot
	// concurrently on the two CPUs.
	mate, tries := w.Collide(0)
	workers := map[int]bool{}
	for _, th := range w.Threads {
		workers[th.TID] = true
	}
	// Every live thread has a slot, the main thread (which never writes
	// its own) included.
	tids := w.LiveTIDs()
	colliding := ddotel.Colliding(tids, w.Capacity)
	t.Logf("threads %v (workers %v), capacity %d, colliding %v (collision found in %d thread starts)", tids, workers, w.Capacity, colliding, tries)
	if !colliding[mate.TID] || !colliding[w.Threads[0].TID] {
		t.Fatalf("Colliding(%v) = %v: the mate %d should be in it", tids, colliding, mate.TID)
	}
	before, since := trackDD(t, s, w)
	w.Storm()
	stormStart := time.Now()
	// Storm until enough samples were accepted and some interrupted
	// writes were refused.
	const wantAccepted = 400
	ok := c.waitFor(60*time.Second, func() bool {
		n := 0
		for _, smp := range c.samples {
			if smp.BootNs > since && smp.Read == ReadBufferSlot {
				n++
			}
		}
		return n >= wantAccepted
	})
	st := waitStats(t, s, 30*time.Second, func(st Stats) bool { return ddRefused(st, ddring.RefusedBusy) > ddRefused(before, ddring.RefusedBusy) })
	writes := w.Calm()
	stormFor := time.Since(stormStart)
	if !ok {
		return []string{fmt.Sprintf("fewer than %d DD samples during %v of storm", wantAccepted, stormFor)}
	}
	accepted, foreign, mixed := 0, 0, 0
	c.mu.Lock()
	for _, smp := range c.samples {
		if smp.Read != ReadBufferSlot || smp.BootNs <= since {
			continue
		}
		accepted++
		if workers[smp.TID] && ddwriter.StormOK(smp.TID, smp.Slot) {
			continue // the sampled worker's own, whole
		}
		if smp.Slot == (ddotel.Slot{}) {
			// Empty: the main thread's slot, or a worker's before its first
			// storm write (a mix with a write is never all zeros: v ≥ 1).
			continue
		}
		// Not the sampled thread's own value: allowed only for a colliding
		// tid, and then it must be one whole value of a worker sharing the
		// slot.
		whole := false
		for other := range workers {
			if other != smp.TID && uint64(other)%uint64(w.Capacity) == uint64(smp.TID)%uint64(w.Capacity) && ddwriter.StormOK(other, smp.Slot) {
				whole = true
			}
		}
		switch {
		case !colliding[smp.TID]:
			t.Errorf("torn or foreign slot accepted for tid %d, alone in its slot: %+v", smp.TID, smp.Slot)
		case whole:
			foreign++
		default:
			mixed++
		}
	}
	c.mu.Unlock()
	busy := ddRefused(st, ddring.RefusedBusy) - ddRefused(before, ddring.RefusedBusy)
	torn := ddRefused(st, ddring.RefusedTorn) - ddRefused(before, ddring.RefusedTorn)
	t.Logf("storm of %v, %d writes: %d DD samples accepted (%d were a colliding mate's whole value, %d of a colliding tid a mix of two writes), refused: %d busy, %d torn; stats %+v",
		stormFor.Round(time.Millisecond), writes, accepted, foreign, mixed, busy, torn, st)
	return nil
}

// staleThenTrack runs worker 0 of w, tracked under an identity the kernel
// refuses, until 20 ticks were refused as stale, then tracks right and
// waits for a sample of that worker taken after the switch (fail, if none
// comes); the ring buffer is FIFO, so any sample taken under the refused
// identity has arrived by then. The worker is idle again on return. It
// returns the stats before and after the refusals and the boot time of the
// switch.
func staleThenTrack(t *testing.T, s *Sampler, c *collector, w *ddwriter.Writer, right Target, fail string) (before, st Stats, switched uint64) {
	t.Helper()
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	w.Busy(0)
	st = waitStats(t, s, 20*time.Second, func(st Stats) bool { return st.Stale >= before.Stale+20 })
	switched = bootNow(t)
	if err := s.TrackTarget(right); err != nil {
		t.Fatal(err)
	}
	tid := w.Threads[0].TID
	if !c.waitFor(20*time.Second, func() bool {
		for _, smp := range c.samples {
			if smp.TID == tid && smp.BootNs > switched {
				return true
			}
		}
		return false
	}) {
		t.Fatal(fail)
	}
	w.Idle(0)
	return before, st, switched
}

// A tracked PID now held by another process (another start time) is not
// read: the recipe carries the start time and the kernel compares it with
// the thread's group leader's.
func TestStartTimeMismatchIsNotRead(t *testing.T) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 64, Threads: 1})
	w.Set(0, 1, 2, 3)
	right := ddTarget(t, w)
	wrong := right
	wrong.StartTicks++ // one tick later: a successor started 10 ms later
	if err := s.TrackTarget(wrong); err != nil {
		t.Fatal(err)
	}
	// The right identity: samples flow.
	before, st, switched := staleThenTrack(t, s, c, w, right, "no sample after tracking with the right start time")
	c.mu.Lock()
	for _, smp := range c.samples {
		if smp.BootNs <= switched {
			t.Errorf("sample under the wrong start time: %+v", smp)
		}
		// Only worker 0 set its slot; the main thread, on CPU for a moment
		// (handling commands), reads its own, empty slot.
		if smp.TID == w.Threads[0].TID && smp.Slot != (ddotel.Slot{TraceIDHigh: 1, TraceIDLow: 2, SpanID: 3}) {
			t.Errorf("sample %+v", smp)
		}
	}
	c.mu.Unlock()
	t.Logf("wrong start time: %d ticks refused (Stale), 0 samples; right one: samples flow (stats %+v)", st.Stale-before.Stale, st)
}

// A real PID reuse: the tracked process exits and a new one gets its PID
// (through /proc/sys/kernel/ns_last_pid) while the recipe is still in the
// map, as between an exit and the receiver's next sync. The successor runs
// the same program with a context of its own: it is not read.
func TestPIDReuseIsNotRead(t *testing.T) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	exe := ddwriter.Build(t, ddwriter.Glibc)
	old := ddwriter.StartBinary(t, exe, ddwriter.Options{Capacity: 64, Threads: 1})
	pid := old.PID
	target := ddTarget(t, old)
	if err := s.TrackTarget(target); err != nil {
		t.Fatal(err)
	}
	old.Quit()
	// Samples taken before this are the old process's own (its threads run
	// while it exits): legitimately read.
	gone := bootNow(t)
	// The successor must start at a later tick than the old process, or
	// the two identities are the same (publisher.ProcessID has tick resolution
	// too).
	waitUptimeAfter(t, target.StartTicks)
	var succ *ddwriter.Writer
	testpub.ClaimPID(t, pid, func() (int, func()) {
		succ = ddwriter.StartBinary(t, exe, ddwriter.Options{Capacity: 64, Threads: 1})
		return succ.PID, succ.Kill
	})
	newTicks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if newTicks == target.StartTicks {
		t.Fatalf("the successor started at the old tick %d", newTicks)
	}
	// The successor's buffer is likely elsewhere (ASLR); if the old
	// address were read in the new process it would be a fault or garbage.
	// Either way nothing may be emitted.
	succ.Set(0, 9, 9, 9)
	// Flush: track the successor under its own identity and wait for one
	// of its samples.
	before, st, switched := staleThenTrack(t, s, c, succ, ddTarget(t, succ), "no sample of the successor under its own identity")
	c.mu.Lock()
	n := 0
	for _, smp := range c.samples {
		if smp.BootNs > gone && smp.BootNs <= switched {
			t.Errorf("the successor was read with its predecessor's recipe: %+v", smp)
		}
		if smp.BootNs > switched {
			n++
		}
	}
	c.mu.Unlock()
	t.Logf("pid %d reused (start %d → %d ticks): %d ticks refused as stale, 0 samples; %d samples once tracked as itself",
		pid, target.StartTicks, newTicks, st.Stale-before.Stale, n)
}

// waitUptimeAfter waits until the boot clock is past ticks+1 (10 ms ticks).
func waitUptimeAfter(t *testing.T, ticks uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for bootNow(t)/10_000_000 <= ticks+1 {
		if time.Now().After(deadline) {
			t.Fatalf("boot clock does not pass %d ticks", ticks)
		}
		time.Sleep(time.Millisecond) // waiting for the clock itself
	}
}

// A thread that never set a context in a large buffer has its slot on a
// page nobody wrote (not resident: the kernel cannot read it): that is an
// empty slot, "no context", not a read failure.
func TestDDUntouchedSlotIsEmpty(t *testing.T) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 65536, Threads: 1})
	tid := w.Threads[0].TID
	before, since := trackDD(t, s, w)
	w.Busy(0)
	if !c.waitFor(20*time.Second, func() bool {
		n := 0
		for _, smp := range c.samples {
			if smp.TID == tid && smp.BootNs > since {
				n++
			}
		}
		return n >= 5
	}) {
		t.Fatal("no samples of the busy worker")
	}
	w.Idle(0)
	for _, smp := range c.ddSamples(tid, since) {
		if smp.Slot != (ddotel.Slot{}) || !smp.SlotNotResident {
			t.Fatalf("untouched slot: %+v (want zero and SlotNotResident)", smp)
		}
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Failures != before.Failures {
		t.Errorf("%d read failures for an untouched slot", st.Failures-before.Failures)
	}
	t.Logf("tid %d, slot %d (page %d of the buffer): %d empty DD samples, stats %+v",
		tid, tid%65536, (32+32*(tid%65536))/4096, len(c.ddSamples(tid, since)), st)
}

// With OffCPU the slot is also read when a thread is switched out: a
// worker that writes its slot and blocks is seen without running again
// (1 Hz ticks alone would take seconds).
func TestDDOffCPU(t *testing.T) {
	s, c := startSampler(t, Options{OffCPU: true, FrequencyHz: 1})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 64, Threads: 1})
	if err := s.TrackTarget(ddTarget(t, w)); err != nil {
		t.Fatal(err)
	}
	tid := w.Threads[0].TID
	want := ddotel.Slot{TraceIDHigh: 0xfeed, TraceIDLow: 0xbeef, SpanID: 0xcafe}
	since := bootNow(t)
	w.Set(0, want.TraceIDHigh, want.TraceIDLow, want.SpanID) // writes, then blocks: a switch-out
	if !c.waitFor(10*time.Second, func() bool {
		for _, smp := range c.samples {
			if smp.TID == tid && smp.OffCPU && smp.BootNs > since && smp.Slot == want {
				return true
			}
		}
		return false
	}) {
		t.Fatal("no off-CPU DD sample of the worker after it wrote and blocked")
	}
	for _, smp := range c.ddSamples(tid, since) {
		if smp.Slot != want && smp.Slot != (ddotel.Slot{}) {
			t.Errorf("sample %+v: neither the slot before the write nor after", smp)
		}
	}
}

// A writer in its own PID namespace (a containerised JVM) takes its slots
// by the TIDs of that namespace. The kernel must read each sampled
// thread's slot at its namespace TID, on a tick and at a context switch
// (three busy workers on fewer CPUs get preempted): every DD sample of a
// worker is exactly the context it wrote, with SlotTID its namespace TID.
// The capacity is one at which every thread's slot differs between its
// TID here and its TID there.
func TestDDSlotInPIDNamespace(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	s, c := startSampler(t, Options{FrequencyHz: 997, OffCPU: true})
	w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 3})
	want := make([]ddotel.Slot, len(w.Threads))
	for i := range w.Threads {
		want[i] = ddotel.Slot{TraceIDHigh: uint64(i), TraceIDLow: 0xe00 + uint64(i), SpanID: 0xf00 + uint64(i)}
		w.Set(i, want[i].TraceIDHigh, want[i].TraceIDLow, want[i].SpanID)
	}
	if err := s.TrackTarget(ddTarget(t, w)); err != nil {
		t.Fatal(err)
	}
	since := bootNow(t)
	for i := range w.Threads {
		w.Busy(i)
	}
	if !c.waitFor(20*time.Second, func() bool {
		on, off := map[int]int{}, map[int]int{}
		for _, smp := range c.samples {
			if smp.BootNs > since && smp.Read == ReadBufferSlot {
				if smp.OffCPU {
					off[smp.TID]++
				} else {
					on[smp.TID]++
				}
			}
		}
		for _, wt := range w.Threads {
			if on[wt.TID] < 10 || off[wt.TID] < 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("not 10 on-CPU and 1 off-CPU DD samples of each busy worker within 20 s")
	}
	for i := range w.Threads {
		w.Idle(i)
	}
	for i, wt := range w.Threads {
		got := c.ddSamples(wt.TID, since)
		for _, smp := range got {
			if smp.PID != w.PID || smp.SlotTID != wt.NSTID || smp.Slot != want[i] {
				t.Fatalf("worker %d (tid %d here, %d in its namespace, capacity %d): sample %+v, want slot %+v",
					i, wt.TID, wt.NSTID, w.Capacity, smp, want[i])
			}
		}
		t.Logf("worker %d (tid %d, namespace tid %d): %d DD samples, all %+v", i, wt.TID, wt.NSTID, len(got), want[i])
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %d, stats: %+v", w.Capacity, st)
}

// TestDDHeaderChanged: once the buffer's header no longer describes the
// tracked buffer (an exec keeps the PID and its start time; here the writer
// rewrites it), the kernel reads no slot and counts it refused for the header.
func TestDDHeaderChanged(t *testing.T) {
	s, c := startSampler(t, Options{FrequencyHz: 997})
	const capacity = 16
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: capacity, Threads: 1})
	tid := w.Threads[0].TID
	w.Set(0, 0, 0xa, 0xb)
	_, since := trackDD(t, s, w)
	w.Busy(0)
	// waitFor holds c.mu while cond runs: cond reads c.samples itself.
	ddAfter := func(since uint64) int {
		n := 0
		for _, smp := range c.samples {
			if smp.TID == tid && smp.Read == ReadBufferSlot && smp.BootNs > since {
				n++
			}
		}
		return n
	}
	if !c.waitFor(20*time.Second, func() bool { return ddAfter(since) >= 3 }) {
		t.Fatal("no DD samples of the busy worker")
	}
	w.Header(0x4F54454C, 1, capacity*2, 32)
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	after := bootNow(t)
	st := waitStats(t, s, 20*time.Second, func(st Stats) bool {
		return ddRefused(st, ddring.RefusedHeader) >= ddRefused(before, ddring.RefusedHeader)+5
	})
	// Flush: the header back, and one sample taken after that delivered
	// (the ring buffer keeps the kernel's order).
	restoring := bootNow(t)
	w.Header(0x4F54454C, 1, capacity, 32)
	restored := bootNow(t)
	if !c.waitFor(20*time.Second, func() bool { return ddAfter(restored) > 0 }) {
		t.Fatal("no DD sample once the header was restored")
	}
	w.Idle(0)
	for _, smp := range c.ddSamples(tid, after) {
		if smp.BootNs <= restoring {
			t.Fatalf("a DD sample while the header was another buffer's: %+v (stats %+v)", smp, st)
		}
	}
	t.Logf("refused for the header: %d, stats %+v", ddRefused(st, ddring.RefusedHeader)-ddRefused(before, ddring.RefusedHeader), st)
}
