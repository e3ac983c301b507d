// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// hogsPerCore CPU-bound processes per core make the host busy: the
// publisher's workers are preempted, run on either CPU and are sampled
// between the hogs.
const hogsPerCore = 4

// TestEnrichFollowing: the receiver with its default thread sampling
// (auto) follows a profiler (a perf_event BPF program of the test's own,
// internal/testutil/fakeprof, standing in for the OTel eBPF profiler) on a busy
// host, and every profile sample built from that profiler's own samples is
// linked to the span its thread was in, or left unlinked: never another.
// The profiles are joined after the publisher exited (a profiler reports
// seconds after its samples): the exited process's context still applies.
// A second profiler that the receiver is not told about stands for one it
// cannot follow: the receiver then uses its own ticks, and still never
// links a wrong span.
func TestEnrichFollowing(t *testing.T) {
	samplertest.Require(t)
	for _, tc := range []struct {
		name     string
		hz       int
		followed bool
		// minRight: share of samples linked right (the rest must be
		// unlinked); 0: only measured.
		minRight float64
	}{
		// Right is 100 % here; a sample whose capture the kernel could
		// not deliver (ring buffer full) would stay unlinked, not wrong.
		{"followed/997Hz", 997, true, 0.99},
		{"own_ticks/997Hz", 997, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.MeasureFloors(t, func(t *testing.T) []string { return followAt(t, tc.hz, tc.followed, tc.minRight) })
		})
	}
}

// guestHogs: in test/vm's emulated one-vCPU guests (OTELCTX_VM_GUEST) two
// hogs keep the vCPU busy, the publisher's workers preempted; four would
// leave the test's own processes a fifth of a slow vCPU.
const guestHogs = 2

func hogCount() int {
	if os.Getenv("OTELCTX_VM_GUEST") != "" {
		return guestHogs
	}
	return hogsPerCore * runtime.NumCPU()
}

// followAt measures one profiler; it returns the floors it missed.
func followAt(t *testing.T, hz int, followed bool, minRight float64) (misses []string) {
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(2)
	hogs := hogCount()
	startHogs(t, hogs)
	name := "otelctx_test_pr" // 15 bytes: the kernel keeps it whole
	follow := []string{name}
	if !followed {
		follow = []string{"not_running"}
	}
	rcvID, cat := ebpfwatch.StartWith(t, p.PID, func(cfg *processctxextension.Config) {
		cfg.ThreadContext.FollowPrograms = follow
	})
	prof, err := fakeprof.Start(hz, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	for k := range 2 {
		waitForRecord(t, p, cat, k, [8]byte{0xee, byte(k)})
	}
	if followed {
		// The receiver finds the profiler at its next program scan: the
		// runs start once it reads the workers at the profiler's samples.
		for k := range 2 {
			waitExact(t, p, cat, k)
		}
	}

	// The profiler's frequency changes how many samples there are, not how
	// each is joined: 997 Hz gives enough of them in seconds (make
	// e2e-profiler measures the OTel eBPF profiler's default 20 Hz).
	spans50, spans10, least := 60, 300, minSamples
	runs := []*run{
		{worker: 0, spans: spans50, ms: 50},
		{worker: 1, spans: spans10, ms: 10},
	}
	dir := t.TempDir()
	for _, r := range runs {
		r.tid = p.Switch(r.worker, r.spans, r.ms, fmt.Sprintf("%s/%d", dir, r.worker))
	}
	for _, r := range runs {
		p.Wait(r.worker)
		if r.truth, err = threadpub.ReadSwitchTruth(fmt.Sprintf("%s/%d", dir, r.worker)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range runs {
		waitForRecord(t, p, cat, r.worker, [8]byte{0xef, byte(r.worker)})
	}
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	// The profiler's samples of the workers inside their spans, with the
	// profiler's own clock conversion, as it would report them.
	for _, r := range runs {
		r.bySpanID = map[string]threadpub.Span{}
		r.firstSeen = map[string]int64{}
		for _, s := range r.truth.Spans {
			r.bySpanID[s.SpanID] = s
			r.firstSeen[s.SpanID] = 0 // the ambiguity measure of score does not apply here
		}
		for _, s := range prof.Samples() {
			if _, in := spanAtBoot(r.truth, s.BootNs); in && s.TID == r.tid {
				r.times = append(r.times, prof.WallTime(s.BootNs).UnixNano())
			}
		}
		slices.Sort(r.times)
		if len(r.times) < least {
			// A starved run (an emulated vCPU the host did not schedule),
			// not a wrong link: measured again, as the other floors are.
			return []string{fmt.Sprintf("spans of %d ms: the profiler took only %d samples inside them", r.ms, len(r.times))}
		}
	}

	// Joined after the publisher exited, as a profiler's report is.
	p.Kill()
	testenv.Eventually(t, "the receiver to notice the publisher's exit", func() bool {
		_, live := cat.Process(p.PID)
		return !live
	})
	out := enrich(t, rcvID, profilesFor(p.PID, p.Exe, runs))
	score(t, out, p.PID, runs)
	res := out.ResourceProfiles().At(0).Resource().Attributes()
	if v, ok := res.Get("service.name"); !ok || v.Str() == "" {
		t.Errorf("samples joined after the exit got no service.name: %v", res.AsRaw())
	}
	for _, r := range runs {
		n := len(r.times)
		right := float64(r.matched) / float64(n)
		t.Logf("spans of %d ms, profiler %d Hz, %d hogs, followed %v: %d samples: %d right (%.2f %%), %d wrong, %d unlinked; nearest exact observation from a sample: median %v",
			r.ms, hz, hogs, followed, n, r.matched, 100*right, r.wrong, r.unlinked, exactSkew(cat, p.PID, r.tid, r.times))
		if r.wrong*1000 > n {
			t.Errorf("spans of %d ms: %d of %d samples linked to a wrong span (> 0.1 %%)", r.ms, r.wrong, n)
		}
		if right < minRight {
			misses = append(misses, fmt.Sprintf("spans of %d ms: %.2f %% right < %.0f %%", r.ms, 100*right, 100*minRight))
		}
	}
	if followed {
		if !catalogExact(cat, p.PID, runs[1].tid, runs[1].times[0]) {
			t.Error("no exact observation in the catalog: the receiver did not follow the profiler")
		}
	}
	return misses
}

// spanAtBoot returns the index of the truth's span that holds bootNs, if
// one does (between two spans the thread is switching records).
func spanAtBoot(truth threadpub.SwitchTruth, bootNs uint64) (int, bool) {
	return slices.BinarySearchFunc(truth.Spans, bootNs, func(s threadpub.Span, b uint64) int {
		switch {
		case s.BootEnd < b:
			return -1
		case s.BootStart > b:
			return 1
		}
		return 0
	})
}

// waitExact spins worker k until the catalog holds an observation of it
// taken at a profiler's sample, bounded by a deadline.
func waitExact(t *testing.T, p *threadpub.Publisher, cat *catalog.Catalog, k int) {
	t.Helper()
	tid := p.Info(k).TID
	from := time.Now().UnixNano()
	what := fmt.Sprintf("an observation of worker %d (tid %d) at the profiler's samples (the receiver follows it)", k, tid)
	// The worker must run among the hogs, as in waitForRecord.
	testenv.EventuallyCPU(t, what, func() bool {
		if catalogExact(cat, p.PID, tid, from) {
			return true
		}
		p.Do("spin %d 10", k)
		return false
	})
}

// exactSkew is the median signed time from each exact observation that
// starts or ends a run of the thread (a capture at a profiler's sample) to
// the nearest of the profiler's samples: about zero when the receiver's
// and the profiler's clock conversions agree.
func exactSkew(cat *catalog.Catalog, pid, tid int, times []int64) time.Duration {
	if len(times) == 0 {
		return 0
	}
	p, _ := cat.ProcessAt(pid, times[0])
	if p == nil {
		return 0
	}
	var d []int64
	nearest := func(at int64) {
		i, _ := slices.BinarySearch(times, at)
		best := int64(math.MaxInt64)
		for _, j := range []int{i - 1, i} {
			if j >= 0 && j < len(times) && abs(at-times[j]) < abs(best) {
				best = at - times[j]
			}
		}
		if best != math.MaxInt64 {
			d = append(d, best)
		}
	}
	for _, r := range cat.AppendRuns(nil, p.ID, tid, times[0], times[len(times)-1]) {
		if r.FirstExact {
			nearest(r.First)
		}
		if r.LastExact {
			nearest(r.Last)
		}
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return time.Duration(d[len(d)/2])
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// catalogExact reports whether the history of the thread of the process
// that held pid at the time at holds an observation taken at a profiler's
// sample.
func catalogExact(cat *catalog.Catalog, pid, tid int, at int64) bool {
	p, _ := cat.ProcessAt(pid, at)
	if p == nil {
		return false
	}
	for _, r := range cat.AppendRuns(nil, p.ID, tid, 0, time.Now().UnixNano()) {
		if r.FirstExact || r.LastExact {
			return true
		}
	}
	return false
}

// startHogs starts n CPU-bound processes for the rest of the test.
func startHogs(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}
