// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Benchmarks against a real publisher: the variable in a shared library
// accessed with TLSDESC (the recommended setup), benchThreads workers each
// with a record of three attributes, parked in a futex (a typical idle
// server thread). Run with:
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/threads/threadread/

const benchThreads = 8

func benchPub(b *testing.B) *pub {
	b.Helper()
	exe, args := threadpub.Build(b, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	p := startPubExe(b, exe, args...)
	p.do("threads %d", benchThreads)
	for k := 0; k < benchThreads; k++ {
		p.do("set %d 0af7651916cd43dd8448eb211c80319c b7ad6b71692033%02x 1 0=/api/v1/users/%d 1=GET 2=user-%d", k, k, k, k)
	}
	return p
}

// reportStops reports the median and the maximum of how long threads were
// kept stopped.
func reportStops(b *testing.B, stops []time.Duration) {
	if len(stops) == 0 {
		return
	}
	slices.Sort(stops)
	b.ReportMetric(float64(stops[len(stops)/2].Nanoseconds()), "stop-median-ns")
	b.ReportMetric(float64(stops[len(stops)*99/100].Nanoseconds()), "stop-p99-ns")
	b.ReportMetric(float64(stops[len(stops)-1].Nanoseconds()), "stop-max-ns")
}

// BenchmarkResolve is the per-process cost of locating otel_thread_ctx_v1.
// cold: a new tlsvar.Resolver, so every loaded ELF file is parsed, as for the
// first process running a given set of binaries. warm: the shared resolver,
// whose per-file cache (device, inode, size, mtime) skips the ELF parsing
// for binaries seen before; what remains is /proc/PID/maps and the dynamic
// linker's structures. Both are paid only when threadread.Cache misses.
func BenchmarkResolve(b *testing.B) {
	p := benchPub(b)
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			if _, err := tlsvar.NewResolver("/proc").Resolve(p.pid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("warm", func(b *testing.B) {
		for b.Loop() {
			if _, err := tlsvar.Resolve("/proc", p.pid); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCacheHit is what the receiver pays per process and snapshot when
// the resolution is cached: /proc/PID/stat and /proc/PID/maps.
func BenchmarkCacheHit(b *testing.B) {
	p := benchPub(b)
	c := NewCache("")
	if _, err := c.Location(p.pid); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Location(p.pid); err != nil {
			b.Fatal(err)
		}
	}
	if c.Resolutions() != 1 {
		b.Fatalf("%d resolutions", c.Resolutions())
	}
}

// BenchmarkSnapshot is one ptrace snapshot of every thread (the workers and
// the main thread): stop, compute the slot, read pointer, header and
// attributes, parse, detach.
func BenchmarkSnapshot(b *testing.B) {
	p := benchPub(b)
	loc, err := tlsvar.Resolve("/proc", p.pid)
	if err != nil {
		b.Fatal(err)
	}
	var stops []time.Duration
	threads := 0
	for b.Loop() {
		ths, st, err := Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap})
		if err != nil {
			b.Fatal(err)
		}
		if st.Records != benchThreads {
			b.Fatalf("%d records", st.Records)
		}
		threads = len(ths)
		for _, th := range ths {
			stops = append(stops, th.Stopped)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*threads), "ns/thread")
	reportStops(b, stops)
}

// BenchmarkEachThreadNoop is ptrace.EachThread with nothing done while
// stopped: the package's overhead over the bare cycle.
func BenchmarkEachThreadNoop(b *testing.B) {
	p := benchPub(b)
	var stops []time.Duration
	threads := 0
	for b.Loop() {
		st, err := ptrace.EachThread(p.pid, func(ptrace.Stopped) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		threads = len(st.Threads)
		for _, ts := range st.Threads {
			stops = append(stops, ts.Stopped)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*threads), "ns/thread")
	reportStops(b, stops)
}

// bareCycle is the baseline: PTRACE_SEIZE, PTRACE_INTERRUPT, a blocking
// wait4, PTRACE_GETREGS, PTRACE_DETACH per thread on the caller's locked
// thread, with the thread list given: the least any ptrace reader can do.
// Stop time is measured as in package ptrace (INTERRUPT to DETACH).
func bareCycle(b *testing.B, tids []int, stops []time.Duration) []time.Duration {
	var regs unix.PtraceRegs
	for _, tid := range tids {
		if err := unix.PtraceSeize(tid); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := unix.PtraceInterrupt(tid); err != nil {
			b.Fatal(err)
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
			b.Fatalf("wait4 %d: %v %#x", tid, err, ws)
		}
		if err := unix.PtraceGetRegs(tid, &regs); err != nil {
			b.Fatal(err)
		}
		if err := unix.PtraceDetach(tid); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, time.Since(start))
	}
	return stops
}

// BenchmarkBareStopCycle is the baseline alone.
func BenchmarkBareStopCycle(b *testing.B) {
	p := benchPub(b)
	tids, err := ptrace.ListThreads("/proc", p.pid)
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var stops []time.Duration
	for b.Loop() {
		stops = bareCycle(b, tids, stops)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tids)), "ns/thread")
	reportStops(b, stops)
	b.ReportMetric(float64(len(tids)), "threads")
}

// BenchmarkSnapshotVsBare interleaves one bare cycle and one Snapshot per
// iteration on the same threads, so that both see the same machine load
// (this host is shared): the ratios are the figures to compare.
func BenchmarkSnapshotVsBare(b *testing.B) {
	p := benchPub(b)
	loc, err := tlsvar.Resolve("/proc", p.pid)
	if err != nil {
		b.Fatal(err)
	}
	tids, err := ptrace.ListThreads("/proc", p.pid)
	if err != nil {
		b.Fatal(err)
	}
	var bareStops, snapStops []time.Duration
	var bareTime, snapTime time.Duration
	for b.Loop() {
		t0 := time.Now()
		runtime.LockOSThread()
		bareStops = bareCycle(b, tids, bareStops)
		runtime.UnlockOSThread()
		t1 := time.Now()
		ths, st, err := Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap})
		snapTime += time.Since(t1)
		bareTime += t1.Sub(t0)
		if err != nil || st.Records != benchThreads || len(ths) != len(tids) {
			b.Fatalf("snapshot: %v, %d records, %d threads", err, st.Records, len(ths))
		}
		for _, th := range ths {
			snapStops = append(snapStops, th.Stopped)
		}
	}
	n := float64(b.N * len(tids))
	b.ReportMetric(float64(snapTime.Nanoseconds())/n, "snap-ns/thread")
	b.ReportMetric(float64(bareTime.Nanoseconds())/n, "bare-ns/thread")
	b.ReportMetric(float64(snapTime)/float64(bareTime), "cost-x-bare")
	slices.Sort(bareStops)
	slices.Sort(snapStops)
	med := func(d []time.Duration) float64 { return float64(d[len(d)/2].Nanoseconds()) }
	b.ReportMetric(med(snapStops), "snap-stop-median-ns")
	b.ReportMetric(med(bareStops), "bare-stop-median-ns")
	b.ReportMetric(med(snapStops)/med(bareStops), "stop-median-x-bare")
	b.ReportMetric(float64(snapStops[len(snapStops)-1].Nanoseconds()), "snap-stop-max-ns")
	b.ReportMetric(float64(bareStops[len(bareStops)-1].Nanoseconds()), "bare-stop-max-ns")
}
