// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// BenchmarkTickCost is the kernel's own accounting of on_tick (BPF run-time
// statistics) at 997 Hz while two threads of one tracked process keep both
// CPUs busy, per source: an OTEP 4947 record (static TLS, 28-byte header +
// attributes) and a DD_OTEL_CTX slot. Reported per invocation (tick-ns),
// with the share of invocations that found a tracked thread (hit-ratio; the
// others found another task on the CPU: one map lookup each).
//
//	go test -run '^$' -bench TickCost -benchtime 5x ./internal/threads/sampler
func BenchmarkTickCost(b *testing.B) {
	testenv.RequireRoot(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		testenv.Missing(b, "BPF_ENABLE_STATS: "+err.Error())
	}
	defer stats.Close()

	b.Run("otep4947", func(b *testing.B) {
		p := threadpub.Start(b, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
		loc, err := tlsvar.Resolve("/proc", p.PID)
		if err != nil {
			b.Fatal(err)
		}
		tickCost(b, func(s *Sampler) error { return s.Track(p.PID, loc) }, func(*Sampler) {
			// Two threads publish a record and work on both CPUs (~0.2 s).
			p.Do("crowd 2 100000000 1000000")
		})
	})
	// The cost of a tick that finds no tracked process (one map lookup):
	// the same busy workers, not tracked.
	b.Run("untracked", func(b *testing.B) {
		w := ddwriter.Start(b, ddwriter.Glibc, ddwriter.Options{Threads: 2})
		tickCost(b, func(*Sampler) error { return nil }, func(s *Sampler) {
			w.Busy(0)
			w.Busy(1)
			prog := s.coll.Programs[samplerProgOnTick]
			p0, _ := prog.Stats()
			deadline := time.Now().Add(30 * time.Second)
			for p, _ := prog.Stats(); p.RunCount < p0.RunCount+1000 && time.Now().Before(deadline); p, _ = prog.Stats() {
				time.Sleep(10 * time.Millisecond) // polling the kernel's counter
			}
			w.Idle(0)
			w.Idle(1)
		})
	})
	b.Run("dd", func(b *testing.B) {
		w := ddwriter.Start(b, ddwriter.Glibc, ddwriter.Options{Threads: 2})
		w.Set(0, 1, 2, 3)
		w.Set(1, 4, 5, 6)
		ticks, err := procstat.StartTicks("/proc", w.PID)
		if err != nil {
			b.Fatal(err)
		}
		target := Target{PID: w.PID, StartTicks: ticks, Buffer: ddBuffer(w.Buf, w.Capacity)}
		tickCost(b, func(s *Sampler) error { return s.TrackTarget(target) }, func(s *Sampler) {
			// Both workers on CPU until ~500 of their ticks were taken.
			st0, _ := s.Stats()
			w.Busy(0)
			w.Busy(1)
			deadline := time.Now().Add(30 * time.Second)
			for st, _ := s.Stats(); st.Samples < st0.Samples+500 && time.Now().Before(deadline); st, _ = s.Stats() {
				time.Sleep(10 * time.Millisecond) // polling the kernel's counter
			}
			w.Idle(0)
			w.Idle(1)
		})
	})
}

// tickCost loads a sampler, tracks with track, and reports on_tick's mean
// run time over b.N runs of work.
func tickCost(b *testing.B, track func(*Sampler) error, work func(*Sampler)) {
	b.Helper()
	s, err := New(Options{FrequencyHz: 997})
	if err != nil {
		testenv.Missing(b, err.Error())
	}
	defer s.Close()
	go func() { _ = s.Run(nil, nil) }() // drain the ring buffer
	if err := track(s); err != nil {
		b.Fatal(err)
	}
	prog := s.coll.Programs[samplerProgOnTick]
	var runtime time.Duration
	var runs, hits uint64
	for b.Loop() {
		p0, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		s0, _ := s.Stats()
		work(s)
		p1, _ := prog.Stats()
		s1, _ := s.Stats()
		runtime += p1.Runtime - p0.Runtime
		runs += p1.RunCount - p0.RunCount
		hits += s1.Samples - s0.Samples
	}
	if runs > 0 {
		b.ReportMetric(float64(runtime.Nanoseconds())/float64(runs), "tick-ns")
		b.ReportMetric(float64(hits)/float64(runs), "hit-ratio")
	}
	st, _ := s.Stats()
	b.ReportMetric(float64(st.Failures), "faults")
	b.ReportMetric(float64(ddRefused(st, ddring.RefusedBusy)+ddRefused(st, ddring.RefusedTorn)), "dd-refused")
}
