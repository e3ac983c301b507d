// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/interleave"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
)

// Every benchmark reads a real writer process (internal/testutil/ddwriter) with real
// process_vm_readv. The baseline is one bare 8-byte process_vm_readv
// (remote.Memory.ReadUint64, as BenchmarkSyscall8 in internal/scan): the
// benchmarks other than BenchmarkSyscall8 run it once per iteration,
// interleaved with what they measure, and report both times and their
// ratio (x-syscall8), so that both see the same load on this shared
// machine. Their ns/op is therefore the sum of the two (and of the maps
// read in internal/scan/ddscan's BenchmarkDiscover); the figures to read
// are the reported metrics (op-ns, ns/thread, x-syscall8). See
// BENCHMARKS.md, "DD_OTEL_CTX reader".
//
//	go test -run '^$' -bench . -count 5 ./internal/threads/schema/ddring/ddslots/ ./internal/scan/ddscan/

// benchWriter starts a writer built with libc, with n workers, each with a
// context in its slot, and returns it with the buffer and all its threads.
func benchWriter(b *testing.B, libc ddwriter.Libc, n int) (*ddwriter.Writer, ddotel.Buffer, []int) {
	b.Helper()
	testenv.RequireRoot(b)
	w := ddwriter.Start(b, libc, ddwriter.Options{Threads: n})
	for _, th := range w.Threads {
		w.Set(th.Index, 0, uint64(0x1000+th.Index), uint64(0x2000+th.TID))
	}
	tids, err := ptrace.ListThreads("/proc", w.PID)
	if err != nil {
		b.Fatal(err)
	}
	if len(tids) != n+1 {
		b.Fatalf("%d threads listed, want %d workers and the main thread", len(tids), n)
	}
	return w, ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}, tids
}

// syscall8 is the baseline: one 8-byte process_vm_readv of the header's
// magic and version.
func syscall8(b *testing.B, mem remote.Memory, addr uint64) {
	v, err := mem.ReadUint64(addr)
	if err != nil || uint32(v) != ddotel.Magic {
		b.Fatalf("baseline read: %#x, %v", v, err)
	}
}

var benchThreads = []int{8, 64}

// BenchmarkSyscall8 is the baseline alone: one 8-byte process_vm_readv.
func BenchmarkSyscall8(b *testing.B) {
	w, _, _ := benchWriter(b, ddwriter.Glibc, 1)
	mem := remote.Memory{PID: w.PID}
	b.ReportAllocs()
	for b.Loop() {
		syscall8(b, mem, w.Buf)
	}
}

// BenchmarkReadSlots is ddslots.ReadSlots over all the threads of a writer
// (n workers with a context, and the main thread, whose slot page may be
// unwritten), thread list given, with an Owners history as the receiver
// keeps: one pagemap read, one process_vm_readv of 2 × 32 bytes per thread.
func BenchmarkReadSlots(b *testing.B) {
	for _, n := range benchThreads {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			w, buf, tids := benchWriter(b, ddwriter.Glibc, n)
			// The Owners history and the namespace-TID cache kept across
			// reads, as the receiver keeps them per process.
			mem, owners, ns := remote.Memory{PID: w.PID}, ddotel.NewOwners(), pidns.NewTIDs("", w.PID)
			var t interleave.Timed
			b.ReportAllocs() // the baseline allocates nothing
			var st ddslots.ReadStats
			for b.Loop() {
				t.Step(func() { syscall8(b, mem, w.Buf) }, func() {
					var err error
					// A reader per read, as ddslots.ReadThreads makes one.
					_, st, err = ddslots.ReadSlots(safemem.New("", w.PID), buf, tids, ddslots.ReadOptions{Owners: owners, NS: ns})
					if err != nil || st.Records != n {
						b.Fatalf("ReadSlots: %v, %+v", err, st)
					}
				})
			}
			t.Report(b, "syscall8", len(tids))
			b.ReportMetric(float64(st.Calls), "readv/op")
		})
	}
}

// BenchmarkReadDD is a whole poll (ReadThreads) of one process's slots as the receiver
// and `otelctx threads` do it (ddslots.ReadThreads): /proc/PID/task listed,
// ReadSlots, /proc/PID/task listed again.
func BenchmarkReadDD(b *testing.B) {
	for _, n := range benchThreads {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			w, buf, tids := benchWriter(b, ddwriter.Glibc, n)
			mem, owners, ns := remote.Memory{PID: w.PID}, ddotel.NewOwners(), pidns.NewTIDs("", w.PID)
			var t interleave.Timed
			b.ReportAllocs() // the baseline allocates nothing
			for b.Loop() {
				t.Step(func() { syscall8(b, mem, w.Buf) }, func() {
					_, st, err := ddslots.ReadThreads("/proc", w.PID, buf, owners, ns)
					if err != nil || st.Records != n {
						b.Fatalf("ReadThreads: %v, %+v", err, st)
					}
				})
			}
			t.Report(b, "syscall8", len(tids))
		})
	}
}

// BenchmarkReadParts measures the parts of a ReadThreads separately, on the same
// writer, to tell what dominates: the process_vm_readv of one copy of each
// slot and of two (ReadSlots' double read), the /proc/PID/pagemap read
// (open, one pread over the slots' pages, close: what ReadSlots does to
// skip unwritten pages) and one /proc/PID/task listing (ReadThreads does two).
func BenchmarkReadParts(b *testing.B) {
	for _, n := range benchThreads {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			w, buf, tids := benchWriter(b, ddwriter.Glibc, n)
			mem := remote.Memory{PID: w.PID}
			readv := func(copies int) func() {
				var addrs []uint64
				for _, th := range w.Threads {
					for range copies {
						addrs = append(addrs, buf.SlotAddr(th.TID))
					}
				}
				raw := make([]byte, ddotel.SlotSize*len(addrs))
				bufs := make([][]byte, len(addrs))
				for i := range bufs {
					bufs[i] = raw[i*ddotel.SlotSize : (i+1)*ddotel.SlotSize]
				}
				ok := make([]bool, len(addrs))
				return func() {
					if calls, err := mem.ReadEach(bufs, addrs, ok); err != nil || calls != 1 {
						b.Fatalf("ReadEach: %d calls, %v", calls, err)
					}
				}
			}
			lo, hi := ^uint64(0), uint64(0)
			for _, th := range w.Threads {
				lo, hi = min(lo, buf.SlotAddr(th.TID)), max(hi, buf.SlotAddr(th.TID)+ddotel.SlotSize-1)
			}
			page := uint64(os.Getpagesize())
			pmBuf := make([]byte, 8*(hi/page-lo/page+1))
			pmPath := fmt.Sprintf("/proc/%d/pagemap", w.PID)
			parts := []struct {
				name string
				op   func()
			}{
				{"readv-single", readv(1)},
				{"readv-double", readv(2)},
				{"pagemap", func() {
					f, err := os.Open(pmPath)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := f.ReadAt(pmBuf, int64(lo/page*8)); err != nil {
						b.Fatal(err)
					}
					f.Close()
				}},
				{"list-tasks", func() {
					if got, err := ptrace.ListThreads("/proc", w.PID); err != nil || len(got) != len(tids) {
						b.Fatalf("ListThreads: %d, %v", len(got), err)
					}
				}},
			}
			for _, p := range parts {
				b.Run(p.name, func(b *testing.B) {
					var t interleave.Timed
					for b.Loop() {
						t.Step(func() { syscall8(b, mem, w.Buf) }, p.op)
					}
					t.Report(b, "syscall8", len(tids))
				})
			}
		})
	}
}
