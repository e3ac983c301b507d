// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler_test

import (
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// The crowd workload: 1,000 threads of one publishing process, each doing a
// fixed amount of integer work while switching its record (two spans)
// every `crowdEvery` iterations. About 2.5 s of wall time on two cores.
const (
	crowdThreads = 1000
	crowdLoops   = 2_500_000
	crowdEvery   = 100_000
)

// selfCPU is the CPU time of this (test) process: the sampler's user-space
// consumer runs here.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// lastProgramID is the highest BPF program ID loaded now.
func lastProgramID() ebpf.ProgramID {
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return id
		}
		id = next
	}
}

// tickProgram finds the on_tick program loaded after `after` (ours, even
// if another test binary runs a sampler at the same time and loaded first).
func tickProgram(tb testing.TB, after ebpf.ProgramID) *ebpf.Program {
	tb.Helper()
	for id := after; ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			tb.Fatal("on_tick not found among the loaded BPF programs")
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && info.Name == "on_tick" {
			return p
		}
		p.Close()
	}
}

// run is one crowd run, with or without the sampler.
type run struct {
	wall, cpu, consumer time.Duration // consumer: this process's CPU meanwhile
	st                  sampler.Stats
	tickNs              float64 // mean on_tick run time from the kernel's BPF stats
	ticks               uint64
}

// crowd runs the workload once; hz 0 runs it without a sampler.
func crowd(b *testing.B, p *threadpub.Publisher, hz int) run {
	b.Helper()
	if hz == 0 {
		c0 := selfCPU()
		w, c := p.Crowd(crowdThreads, crowdLoops, crowdEvery)
		return run{wall: w, cpu: c, consumer: selfCPU() - c0}
	}
	before := lastProgramID()
	s, stop := runSamplerWith(b, sampler.Options{FrequencyHz: hz}, p.PID)
	prog := tickProgram(b, before)
	defer prog.Close()
	s0, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	c0 := selfCPU()
	w, c := p.Crowd(crowdThreads, crowdLoops, crowdEvery)
	r := run{wall: w, cpu: c, consumer: selfCPU() - c0}
	s1, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	if r.st, err = s.Stats(); err != nil {
		b.Fatal(err)
	}
	stop()
	if r.ticks = s1.RunCount - s0.RunCount; r.ticks > 0 {
		r.tickNs = float64(s1.Runtime-s0.Runtime) / float64(r.ticks)
	}
	return r
}

// runSamplerWith is runSampler with the receiver's consumer: parse every
// record and record it in a catalog's history.
func runSamplerWith(tb testing.TB, opts sampler.Options, pid int) (*sampler.Sampler, func() []sampler.Sample) {
	tb.Helper()
	cat := catalog.New()
	cat.Apply([]publisher.Event{{Kind: publisher.Found, Process: &publisher.Process{ID: publisher.ProcessID{PID: pid}}}})
	keyMap := threadpub.KeyMap
	return runSamplerFunc(tb, opts, pid, func(smp sampler.Sample) {
		var rec *catalog.ThreadRecord
		if smp.Record != nil {
			if r, err := threadctx.Parse(smp.Record); err == nil {
				named, _ := r.Named(keyMap)
				rec = &catalog.ThreadRecord{PID: smp.PID, TID: smp.TID, SeenAt: smp.Time, Record: r, Attributes: named}
			}
		}
		cat.ObserveFor(publisher.ProcessID{PID: smp.PID}, smp.TID, smp.Time, rec, smp.Followed)
	})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkSamplerOverhead measures what the eBPF sampler at 97 Hz costs a
// process of 1,000 busy publishing threads: the same fixed work is run
// without and with the sampler tracking the process, in ABBA order
// (off, on, on, off) per round so that drift of the machine cancels, and
// the medians of the per-round ratios are reported:
//
//	wall-ratio       wall time of the work, on / off (both cores saturated:
//	                 time stolen by the BPF program shows here)
//	cpu-ratio        CPU time of the publishing process, on / off
//	total-cpu-ratio  the same plus this process's CPU (the sampler's
//	                 user-space consumer) on both sides
//	tick-ns          mean run time of on_tick per invocation, from the
//	                 kernel's BPF statistics (BPF_ENABLE_STATS)
//	samples/s, drops the 97 Hz runs' kernel counters
//	drops-1khz, samples-1khz  one run of the same work at 1,000 Hz
//
// Run it alone: go test -run '^$' -bench SamplerOverhead -benchtime=1x ./test/sampler
// (OTELCTX_BENCH_ROUNDS sets the rounds, default 3).
func BenchmarkSamplerOverhead(b *testing.B) {
	samplertest.Require(b)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("OTELCTX_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("BPF_ENABLE_STATS: %v", err)
	}
	defer stats.Close()
	prevTimeout := threadpub.ReplyTimeout
	threadpub.ReplyTimeout = 5 * time.Minute
	defer func() { threadpub.ReplyTimeout = prevTimeout }()
	p := threadpub.Start(b, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	crowd(b, p, 0) // warm-up: thread stacks, page faults

	var wallR, cpuR, totalR, tickNs []float64
	var samples, dropped, failures uint64
	var onWall time.Duration
	for b.Loop() {
		for range rounds {
			off1 := crowd(b, p, 0)
			on1 := crowd(b, p, 97)
			on2 := crowd(b, p, 97)
			off2 := crowd(b, p, 0)
			for _, pair := range [][2]run{{off1, on1}, {off2, on2}} {
				off, on := pair[0], pair[1]
				wallR = append(wallR, float64(on.wall)/float64(off.wall))
				cpuR = append(cpuR, float64(on.cpu)/float64(off.cpu))
				totalR = append(totalR, float64(on.cpu+on.consumer)/float64(off.cpu+off.consumer))
				tickNs = append(tickNs, on.tickNs)
				samples += on.st.Samples
				dropped += on.st.Dropped
				failures += on.st.Failures
				onWall += on.wall
			}
		}
		k := crowd(b, p, 1000)
		b.ReportMetric(float64(k.st.Dropped), "drops-1khz")
		b.ReportMetric(float64(k.st.Samples), "samples-1khz")
		b.ReportMetric(k.tickNs, "tick-ns-1khz")
	}
	b.ReportMetric(median(wallR), "wall-ratio")
	b.ReportMetric(median(cpuR), "cpu-ratio")
	b.ReportMetric(median(totalR), "total-cpu-ratio")
	b.ReportMetric(median(tickNs), "tick-ns")
	b.ReportMetric(float64(samples)/onWall.Seconds(), "samples/s")
	b.ReportMetric(float64(dropped), "drops")
	b.ReportMetric(float64(failures), "faults")
	b.Logf("per-pair ratios: wall %.4f, cpu %.4f, total cpu %.4f; tick ns %.0f", wallR, cpuR, totalR, tickNs)
}
