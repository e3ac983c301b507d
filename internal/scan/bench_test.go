// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// Every benchmark reads a real publisher process (glibc build) with real
// process_vm_readv. BenchmarkSyscall8 is the baseline the others are
// compared with in BENCHMARKS.md.

// realisticPublisher starts a publisher with what an SDK publishes: ten
// resource attributes and the thread-context reference data.
func realisticPublisher(b *testing.B, placement string) (p *testpub.Publisher, addr, stamp uint64) {
	b.Helper()
	testenv.RequireRoot(b)
	p = testpub.Start(b, testpub.Glibc)
	p.Do("placement %s", placement)
	p.Set(
		"service.name", "checkout",
		"service.namespace", "shop",
		"service.instance.id", "6f1c1e4e-1c53-4a0e-9f57-2d3b7a0d8a11",
		"service.version", "1.24.3",
		"deployment.environment.name", "production",
		"host.name", "node-17.eu-west-1.internal",
		"telemetry.sdk.name", "opentelemetry",
		"telemetry.sdk.language", "cpp",
		"telemetry.sdk.version", "1.22.0",
	)
	p.Do("setint process.pid %d", p.PID)
	p.Do("schema tlsdesc_v1_dev")
	p.Do("keymap http.route,http.request.method,user.id")
	addr, stamp = p.Publish()
	return p, addr, stamp
}

// BenchmarkSyscall8 is the bare cost of one 8-byte process_vm_readv.
func BenchmarkSyscall8(b *testing.B) {
	p, addr, stamp := realisticPublisher(b, "heap")
	mem := remote.Memory{PID: p.PID}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v, err := mem.ReadUint64(addr + processctx.OffsetPublishedAtNs)
		if err != nil || v != stamp {
			b.Fatal(v, err)
		}
	}
}

// BenchmarkFullRead is what a changed context costs: header, payload, stamp
// re-read and Decode of a realistic payload.
func BenchmarkFullRead(b *testing.B) {
	for _, placement := range []string{"heap", "inline"} {
		b.Run(placement, func(b *testing.B) {
			p, addr, stamp := realisticPublisher(b, placement)
			mem := remote.Memory{PID: p.PID}
			lim := processctx.DefaultLimits()
			var buf []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				raw, _, err := processctx.ReadRaw(mem, addr, lim.MaxPayloadSize, processctx.DefaultAttempts, buf)
				if err != nil || raw.PublishedAtNs != stamp {
					b.Fatal(err)
				}
				buf = raw.Payload[:0]
				c, _, err := processctx.Decode(raw.Payload, lim)
				if err != nil || len(c.Resource.Attributes) != 10 {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(len(buf[:cap(buf)])), "payload-cap-bytes")
		})
	}
}

// BenchmarkDecode is Decode alone, for the interpretation of FullRead.
func BenchmarkDecode(b *testing.B) {
	p, addr, _ := realisticPublisher(b, "heap")
	raw, _, err := processctx.ReadRaw(remote.Memory{PID: p.PID}, addr, processctx.DefaultMaxPayloadSize, 3, nil)
	if err != nil {
		b.Fatal(err)
	}
	lim := processctx.DefaultLimits()
	b.ReportAllocs()
	b.SetBytes(int64(len(raw.Payload)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := processctx.Decode(raw.Payload, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnchangedPoll is the steady state: a tracked publisher whose
// context did not change.
func BenchmarkUnchangedPoll(b *testing.B) {
	b.Run("stamp", func(b *testing.B) {
		// What Scan does per tracked process: one 8-byte read, one compare.
		p, addr, stamp := realisticPublisher(b, "heap")
		mem := remote.Memory{PID: p.PID}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			v, err := processctx.ReadStamp(mem, addr)
			if err != nil {
				b.Fatal(err)
			}
			if v != stamp {
				b.Fatal("changed")
			}
		}
	})
	// A whole Scan where only the benchmark's N publishers pass the filter
	// (all other processes of the host are known and filtered).
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("scan/publishers=%d", n), func(b *testing.B) {
			pubs := make([]int, n)
			for i := range pubs {
				p, _, _ := realisticPublisher(b, "heap")
				pubs[i] = p.PID
			}
			benchScan(b, pubs, pubs, (*scan.Scanner).Scan)
		})
	}
}

// BenchmarkDiscoveryScan is Scan once every PID is known: a host with 1
// publisher and 0/200/500 idle processes, and 1/10/50 publishers among 500
// idle processes. The cost should follow the publishers.
func BenchmarkDiscoveryScan(b *testing.B) {
	testenv.RequireRoot(b)
	for _, tc := range []struct{ pubs, idle int }{
		{1, 0}, {1, 200}, {1, 500}, {10, 500}, {50, 500},
	} {
		b.Run(fmt.Sprintf("publishers=%d/idle=%d", tc.pubs, tc.idle), func(b *testing.B) {
			var pids, pubs []int
			for i := 0; i < tc.pubs; i++ {
				p, _, _ := realisticPublisher(b, "heap")
				pubs = append(pubs, p.PID)
			}
			for _, c := range idleProcesses(b, tc.idle) {
				pids = append(pids, c.Process.Pid)
			}
			benchScan(b, append(pids, pubs...), pubs, (*scan.Scanner).Scan)
		})
	}
}

// BenchmarkPollRound is the same hosts as BenchmarkDiscoveryScan with
// Poll, the round the receiver runs between discoveries: it does not list
// /proc, so its cost should not move with the idle processes at all.
func BenchmarkPollRound(b *testing.B) {
	testenv.RequireRoot(b)
	for _, tc := range []struct{ pubs, idle int }{
		{1, 0}, {1, 500}, {10, 500}, {50, 500},
	} {
		b.Run(fmt.Sprintf("publishers=%d/idle=%d", tc.pubs, tc.idle), func(b *testing.B) {
			var pids, pubs []int
			for i := 0; i < tc.pubs; i++ {
				p, _, _ := realisticPublisher(b, "heap")
				pubs = append(pubs, p.PID)
			}
			for _, c := range idleProcesses(b, tc.idle) {
				pids = append(pids, c.Process.Pid)
			}
			benchScan(b, append(pids, pubs...), pubs, (*scan.Scanner).Poll)
		})
	}
}

// benchScan measures round (Scan or Poll) with a scanner that looks at ours (publishers and
// idle processes) and ignores the rest of the host, after a warm-up scan
// found every publisher. RecheckMin is long so that no idle process is
// re-examined during the measurement: what is measured is the per-scan
// cost, not the amortised recheck (see BENCHMARKS.md).
func benchScan(b *testing.B, ours, pubs []int, round func(*scan.Scanner) ([]publisher.Event, scan.Stats, error)) {
	b.Helper()
	accept := map[int]bool{}
	for _, pid := range ours {
		accept[pid] = true
	}
	s, err := scan.New(scan.Options{
		Filter:     func(pid int, _ string) bool { return accept[pid] },
		RecheckMin: time.Hour, RecheckMax: time.Hour,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(scanTimeout)
	for {
		if _, _, err := s.Scan(); err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, pid := range pubs {
			if _, ok := s.Lookup(pid); ok {
				n++
			}
		}
		if n == len(pubs) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d publishers found", n, len(pubs))
		}
	}
	var polled, scanned int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		evs, st, err := round(s)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range evs {
			if accept[e.Process.ID.PID] {
				b.Fatalf("event %v for pid %d during an unchanged scan", e.Kind, e.Process.ID.PID)
			}
		}
		polled += st.Polled
		scanned += st.ProcessesScanned
	}
	b.StopTimer()
	if polled < b.N*len(pubs) {
		b.Fatalf("%d polls in %d scans of %d publishers", polled, b.N, len(pubs))
	}
	b.ReportMetric(float64(scanned)/float64(b.N), "maps-parsed/op")
	b.ReportMetric(float64(countProcs(b)), "host-procs")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(pubs)), "ns/publisher")
}

// countProcs counts the processes of the host, for the interpretation of
// the scan benchmarks.
func countProcs(b *testing.B) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// BenchmarkPollPublishers is Poll with many tracked, idle publishers (the
// case of thousands of SDK processes on one node), and PollPIDs naming one
// of them (a prctl event). Each op is one round; in the same iterations,
// untimed by b, the bare 8-byte process_vm_readv of the same publishers'
// stamps is timed too, so x-syscall8 (per-publisher cost ÷ bare read) is a
// ratio within one run, the kernel's cost of touching N address spaces in
// both.
func BenchmarkPollPublishers(b *testing.B) {
	testenv.RequireRoot(b)
	const most = 3000
	pubs := startMinimalPublishers(b, most)
	for _, n := range []int{100, most} {
		b.Run(fmt.Sprintf("poll/publishers=%d", n), func(b *testing.B) {
			benchPollMany(b, pubs[:n], false)
		})
	}
	b.Run(fmt.Sprintf("pollpids/publishers=%d", most), func(b *testing.B) {
		benchPollMany(b, pubs, true)
	})
}

// startMinimalPublishers starts n publishers, each with one attribute
// published: a poll reads the stamp only, whatever the payload.
func startMinimalPublishers(b *testing.B, n int) []int {
	b.Helper()
	exe := testpub.Build(b, testpub.Glibc)
	pids := make([]int, n)
	for i := range pids {
		p := testpub.StartBinary(b, exe)
		p.Set("service.name", "svc-"+strconv.Itoa(i))
		p.Publish()
		pids[i] = p.PID
	}
	return pids
}

// benchPollMany measures Poll of every publisher in pubs, or (named)
// PollPIDs of one of them in turn, against the bare reads of the same
// stamps.
func benchPollMany(b *testing.B, pubs []int, named bool) {
	accept := make(map[int]bool, len(pubs))
	for _, pid := range pubs {
		accept[pid] = true
	}
	s, err := scan.New(scan.Options{
		Filter:     func(pid int, _ string) bool { return accept[pid] },
		RecheckMin: time.Hour, RecheckMax: time.Hour,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.Scan(); err != nil {
		b.Fatal(err)
	}
	mems := make([]remote.Memory, len(pubs))
	addrs := make([]uint64, len(pubs))
	for i, pid := range pubs {
		p, ok := s.Lookup(pid)
		if !ok {
			b.Fatalf("publisher %d not found by the first Scan", pid)
		}
		mems[i], addrs[i] = remote.Memory{PID: pid}, p.MappingAddr+processctx.OffsetPublishedAtNs
	}
	round, per := s.Poll, len(pubs) // publishers read per op
	if named {
		per = 1
	}
	var bare time.Duration
	readBare := func(first int) {
		t0 := time.Now()
		for j := first; j < first+per; j++ {
			if _, err := mems[j].ReadUint64(addrs[j]); err != nil {
				b.Fatal(err)
			}
		}
		bare += time.Since(t0)
	}
	polled := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first := 0
		if named {
			first = i % len(pubs)
			round = func() ([]publisher.Event, scan.Stats, error) { return s.PollPIDs(pubs[first]) }
		}
		evs, st, err := round()
		if err != nil || len(evs) != 0 {
			b.Fatalf("round: %d events, %v", len(evs), err)
		}
		polled += st.Polled
		if !named {
			// A round is long: its bare reads are timed right after it
			// (stopping b's timer per op would distort a short op).
			b.StopTimer()
			readBare(0)
			b.StartTimer()
		}
	}
	b.StopTimer()
	if named {
		for i := 0; i < b.N; i++ {
			readBare(i % len(pubs))
		}
	}
	if polled != b.N*per {
		b.Fatalf("%d stamp reads in %d rounds of %d publishers", polled, b.N, per)
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(per)
	sys := float64(bare.Nanoseconds()) / float64(b.N) / float64(per)
	b.ReportMetric(ns, "ns/publisher")
	b.ReportMetric(sys, "syscall8-ns")
	b.ReportMetric(ns/sys, "x-syscall8")
}
