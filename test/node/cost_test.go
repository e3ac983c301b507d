// SPDX-License-Identifier: Apache-2.0

//go:build linux

package node_test

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// records counts the samples with a record the sampler delivered.
var records atomic.Int64

// costWindow: how long the sampler's on_tick runs per measurement.
const costWindow = 5 * time.Second

// BenchmarkBPFCapture: the kernel run time of the sampler's on_tick per
// capture (BPF run-time statistics), for a thread of a native OTEP 4947
// publisher (one pointer read, then the record), of a Node.js publisher
// (the nodejs_v1_dev walk), and of one whose frames hold 1,000 more
// AsyncLocalStorage values. Each spins in a span on its CPU while the
// sampler ticks at 997 Hz; "base" is a window with nothing tracked (the
// lookup every tick costs), subtracted from the others.
func BenchmarkBPFCapture(b *testing.B) {
	samplertest.Require(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		testenv.Missing(b, "BPF run-time statistics: "+err.Error())
	}
	defer stats.Close()
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Run(func(smp sampler.Sample) {
			if smp.Record != nil {
				records.Add(1)
			}
		}, nil)
	}()
	defer func() {
		_ = s.Close()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	prog, err := newestProgram("on_tick")
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	base := measure(b, s, prog)
	b.Logf("base: %.0f ns per on_tick run (no capture)", base.perRun())
	for _, tc := range []struct {
		name  string
		track func(b *testing.B) (stop func())
	}{
		{"native", trackNative(s)},
		{"node", trackNode(s, 0)},
		{"node_1000_storages", trackNode(s, 1000)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var w window
			var recs int64
			for range b.N {
				stop := tc.track(b)
				r0 := records.Load()
				w = measure(b, s, prog)
				recs = records.Load() - r0
				stop()
			}
			b.ReportMetric(w.perCapture(base), "ns/capture")
			b.ReportMetric(float64(w.captures), "captures")
			// Captures that found a record: the walk reached it.
			b.ReportMetric(float64(recs), "records")
		})
	}
}

type window struct {
	runs, captures uint64
	ns             time.Duration
}

func (w window) perRun() float64 { return float64(w.ns) / float64(w.runs) }

// perCapture: the window's run time less what its runs would cost without
// a capture (base's per-run time), per capture.
func (w window) perCapture(base window) float64 {
	return (float64(w.ns) - float64(w.runs)*base.perRun()) / float64(w.captures)
}

func measure(b *testing.B, s *sampler.Sampler, prog *ebpf.Program) window {
	b.Helper()
	before, st0 := runStats(b, prog), samples(b, s)
	time.Sleep(costWindow) // the measurement is of this interval
	after, st1 := runStats(b, prog), samples(b, s)
	return window{runs: after.runs - before.runs, ns: after.ns - before.ns, captures: st1 - st0}
}

func runStats(b *testing.B, prog *ebpf.Program) window {
	b.Helper()
	st, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return window{runs: st.RunCount, ns: st.Runtime}
}

func samples(b *testing.B, s *sampler.Sampler) uint64 {
	b.Helper()
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	return st.Samples
}

// newestProgram is the last loaded program named name (the sampler's).
func newestProgram(name string) (*ebpf.Program, error) {
	var newest ebpf.ProgramID
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && info.Name == name {
			newest = id
		}
		p.Close()
	}
	if newest == 0 {
		return nil, errors.New("no program " + name)
	}
	return ebpf.NewProgramFromID(newest)
}

func trackNative(s *sampler.Sampler) func(b *testing.B) func() {
	return func(b *testing.B) func() {
		p := threadpub.Start(b, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
		p.Threads(1)
		p.Set(0, threadpub.Record{TraceID: [16]byte{1}, SpanID: [8]byte{1}, Attrs: map[uint8]string{0: "GET_/x"}})
		loc, err := tlsvar.Resolve("/proc", p.PID)
		if err != nil {
			b.Fatal(err)
		}
		track(b, s, p.PID, schema.Variable{Schema: &otep4947.Schema, Location: loc})
		spun := make(chan struct{})
		go func() {
			defer close(spun)
			p.Do("spin 0 %d", (costWindow + time.Second).Milliseconds())
		}()
		return func() {
			<-spun
			_ = s.Untrack(p.PID)
			p.Kill()
		}
	}
}

func trackNode(s *sampler.Sampler, extra int) func(b *testing.B) func() {
	return func(b *testing.B) func() {
		p := nodepub.Start(b, nodepub.Node(b, 24), []string{"NODEPUB_EXTRA_ALS=" + strconv.Itoa(extra)}, "shapes")
		r, _ := p.NextReady(b) // main-none
		p.Release(b, r.Name)
		if r, _ = p.NextReady(b); r.Name != "main-sync" { // spins in a span
			b.Fatalf("step %q", r.Name)
		}
		tl := nodepub.Context(b, p.PID)
		v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return tlsvar.Resolve("/proc", p.PID) })
		if err != nil {
			b.Fatal(err)
		}
		track(b, s, p.PID, v)
		return func() {
			_ = s.Untrack(p.PID)
			p.Kill()
		}
	}
}

func track(b *testing.B, s *sampler.Sampler, pid int, v schema.Variable) {
	b.Helper()
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.TrackTarget(sampler.Target{PID: pid, StartTicks: ticks, Thread: &v}); err != nil {
		b.Fatal(fmt.Errorf("tracking %d: %w", pid, err))
	}
}
