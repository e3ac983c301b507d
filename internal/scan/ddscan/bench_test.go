// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/interleave"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// The benchmarks read a real writer process (internal/testutil/ddwriter)
// with real process_vm_readv, interleaved with the baseline of
// internal/threads/schema/ddring/ddslots (one bare 8-byte process_vm_readv); the figures
// to read are the reported metrics (op-ns, x-syscall8). See BENCHMARKS.md,
// "DD_OTEL_CTX reader".
//
//	go test -run '^$' -bench . -count 5 ./internal/threads/schema/ddring/ddslots/ ./internal/scan/ddscan/

// benchWriter starts a writer built with libc, with n workers, each with a
// context in its slot, and returns it with its buffer.
func benchWriter(b *testing.B, libc ddwriter.Libc, n int) (*ddwriter.Writer, ddotel.Buffer) {
	b.Helper()
	testenv.RequireRoot(b)
	w := ddwriter.Start(b, libc, ddwriter.Options{Threads: n})
	for _, th := range w.Threads {
		w.Set(th.Index, 0, uint64(0x1000+th.Index), uint64(0x2000+th.TID))
	}
	return w, ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
}

// syscall8 is the baseline: one 8-byte process_vm_readv of the header's
// magic and version.
func syscall8(b *testing.B, mem remote.Memory, addr uint64) {
	v, err := mem.ReadUint64(addr)
	if err != nil || uint32(v) != ddotel.Magic {
		b.Fatalf("baseline read: %#x, %v", v, err)
	}
}

// BenchmarkRevalidate is the header check the scanner makes on every poll
// of a process with a buffer (ddscan.Revalidate: one pagemap entry, one
// 16-byte process_vm_readv), through the safe reader the scanner keeps per
// tracked process (its pagemap held open, reset for each poll).
func BenchmarkRevalidate(b *testing.B) {
	w, buf := benchWriter(b, ddwriter.Glibc, 8)
	mem := remote.Memory{PID: w.PID}
	safe := safemem.New("", w.PID)
	pm, err := pagemap.Open("", w.PID)
	if err != nil {
		b.Fatal(err)
	}
	defer pm.Close()
	safe.UsePagemap(pm)
	var t interleave.Timed
	b.ReportAllocs() // the baseline allocates nothing
	for b.Loop() {
		t.Step(func() { syscall8(b, mem, w.Buf) }, func() {
			safe.Reset()
			if err := ddscan.Revalidate(safe, buf); err != nil {
				b.Fatal(err)
			}
		})
	}
	t.Report(b, "syscall8", 0)
}

// BenchmarkDiscover is ddscan.Discover of a writer with 8 workers and the
// default 65536 slots, interleaved with the baseline and with one read of
// /proc/PID/maps (os.ReadFile, not parsed): x-maps is Discover's time over
// the maps read's. start: the glibc build, whose buffer starts a mapping
// (one pagemap entry per candidate, one process_vm_readv). merged: the
// musl build, whose buffer is swallowed by a thread stack mapped next to
// it (the search inside merged mappings: a pagemap read per candidate and
// a second process_vm_readv). The benchmark fails if the layout is not the
// one its name says.
func BenchmarkDiscover(b *testing.B) {
	for _, c := range []struct {
		name   string
		libc   ddwriter.Libc
		inside bool
	}{
		{"start", ddwriter.Glibc, false},
		{"merged", ddwriter.Musl, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			w, _ := benchWriter(b, c.libc, 8)
			mem := remote.Memory{PID: w.PID}
			mapsPath := fmt.Sprintf("/proc/%d/maps", w.PID)
			var t interleave.Timed
			var maps time.Duration
			var st ddscan.DiscoverStats
			for b.Loop() {
				t0 := time.Now()
				if _, err := os.ReadFile(mapsPath); err != nil {
					b.Fatal(err)
				}
				maps += time.Since(t0)
				t.Step(func() { syscall8(b, mem, w.Buf) }, func() {
					var found ddotel.Buffer
					var err error
					found, st, err = ddscan.Discover("/proc", safemem.New("", w.PID))
					if err != nil || found.Addr != w.Buf {
						b.Fatalf("Discover: %+v, %+v, %v (buffer at %#x)", found, st, err, w.Buf)
					}
				})
			}
			if inside := st.PagemapEntries > 0; inside != c.inside {
				b.Fatalf("searched inside merged mappings: %v, want %v (%+v)", inside, c.inside, st)
			}
			t.Report(b, "syscall8", 0)
			n := float64(b.N)
			b.ReportMetric(float64(maps.Nanoseconds())/n, "maps-ns")
			b.ReportMetric(float64(t.Op())/float64(maps), "x-maps")
			b.ReportMetric(float64(st.Candidates), "candidates")
			b.ReportMetric(float64(st.Reads), "readv/op")
			b.ReportMetric(float64(st.PagemapEntries), "pagemap-entries")
			b.ReportMetric(float64(st.InsideProbes), "inside-probes")
		})
	}
}
