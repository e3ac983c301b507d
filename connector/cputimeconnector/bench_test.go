// SPDX-License-Identifier: Apache-2.0

//go:build linux

package cputimeconnector

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"golang.org/x/sys/unix"
)

// The join benchmark's messages (processor/ctxenrichprocessor,
// BenchmarkProcessProfiles) as ctx_enrich hands them on: 10,000 samples
// from 100 threads of 4 processes over 1 s, each with thread.id,
// thread.name, cpu.logical_number, and the link and the two attributes
// (8 values each) of the span its thread was in, a new span every 20 ms or
// 200 ms.
const (
	benchSamples   = 10000
	benchProcesses = 4
	benchThreads   = 100
	benchWindow    = time.Second
)

func benchMessage(spanLen time.Duration) pprofile.Profiles {
	rng := rand.New(rand.NewPCG(1, 2))
	b := newProfBuilder()
	cpus := make([]int32, 8)
	for i := range cpus {
		cpus[i] = b.attr("cpu.logical_number", int64(i))
	}
	routes, methods := make([]int32, 8), make([]int32, 8)
	for i := range 8 {
		routes[i] = b.attr("http.route", fmt.Sprintf("/route/%d", i))
		methods[i] = b.attr("http.request.method", fmt.Sprintf("M%d", i))
	}
	stacks := make([]int32, 50)
	for i := range stacks {
		stacks[i] = b.stack(fmt.Sprintf("function_%d", i))
	}
	perProc := benchThreads / benchProcesses
	for p := range benchProcesses {
		pid := 1000 + p
		prof := b.profile(map[string]any{"process.pid": int64(pid), "service.name": fmt.Sprintf("svc-%d", p),
			"service.instance.id": fmt.Sprintf("i-%d", p), "host.name": "bench"}, 20)
		n := benchSamples / benchProcesses
		for i := range n {
			at := t0.Add(time.Duration(i) * benchWindow / time.Duration(n))
			th := rng.IntN(perProc)
			tid := pid*100 + th
			span := uint64(tid)<<16 | uint64(at.Sub(t0)/spanLen)
			// A span's route and method stay the span's.
			r := int(span*2654435761>>7) % 8
			b.sample(prof, b.link(span, span), stacks[rng.IntN(len(stacks))], []time.Time{at},
				b.attr("thread.id", int64(tid)), b.attr("thread.name", fmt.Sprintf("worker-%d", tid)),
				cpus[rng.IntN(len(cpus))], routes[r], methods[r])
		}
	}
	return b.pd
}

// BenchmarkCPUTime measures ConsumeProfiles of each output (and of both,
// as a collector runs them) on the join benchmark's messages: samples/s,
// allocations and CPU ns per sample of the Consume calls alone, with a
// flush every 100 messages (not timed: a flush is per interval, not per
// message). Compare with ctx_enrich's BenchmarkProcessProfiles in the same
// run (BENCHMARKS.md gives the command).
func BenchmarkCPUTime(b *testing.B) {
	ctx := context.Background()
	for _, span := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond} {
		in := benchMessage(span)
		for _, out := range []string{"metrics", "logs", "both"} {
			b.Run(fmt.Sprintf("span=%v/%s", span, out), func(b *testing.B) {
				cfg := defaultConfig()
				var cs []*cpuConnector
				if out != "logs" {
					c, _ := newMetrics(b, cfg, new(consumertest.MetricsSink))
					cs = append(cs, c)
				}
				if out != "metrics" {
					cs = append(cs, newLogs(b, cfg, new(consumertest.LogsSink)))
				}
				var mallocs uint64
				var m0, m1 runtime.MemStats
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var cpu time.Duration
				i := 0
				b.ResetTimer()
				for b.Loop() {
					runtime.ReadMemStats(&m0)
					c0 := cpuTime(b)
					for _, c := range cs {
						if err := c.ConsumeProfiles(ctx, in); err != nil {
							b.Fatal(err)
						}
					}
					cpu += cpuTime(b) - c0
					runtime.ReadMemStats(&m1)
					mallocs += m1.Mallocs - m0.Mallocs
					if i++; i%100 == 0 {
						b.StopTimer()
						for _, c := range cs {
							c.flush(ctx)
						}
						b.StartTimer()
					}
				}
				n := float64(b.N) * benchSamples
				b.ReportMetric(n/b.Elapsed().Seconds(), "samples/s")
				b.ReportMetric(float64(mallocs)/n, "allocs/sample")
				b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/sample")
			})
		}
	}
}

// cpuTime is the calling thread's CPU time: what a shared machine's load
// disturbs least.
func cpuTime(tb testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
