// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// expect is what a cell must resolve to on x86-64, as verified on this
// machine (glibc 2.36, musl 1.2.3); README.md explains each outcome.
func expect(c threadpub.Cell) (tlsvar.Model, tlsvar.Placement) {
	model := tlsvar.ModelTLSDESC
	if c.Dialect == threadpub.GD {
		model = tlsvar.ModelGeneralDynamic
	}
	if c.Where == threadpub.Exe {
		// The linker relaxes the executable's own accesses to Local Exec:
		// no relocation names the symbol.
		return tlsvar.ModelLocalExec, tlsvar.StaticTLS
	}
	switch c.Where {
	case threadpub.SharedLib:
		return model, tlsvar.StaticTLS // start-up modules are in static TLS in both libcs
	case threadpub.Dlopen:
		if c.Libc == threadpub.Glibc && c.Dialect == threadpub.TLSDESC {
			// glibc gives a dlopen'ed TLSDESC module static TLS from the
			// optional surplus (TRY_STATIC_TLS at relocation time)...
			return model, tlsvar.StaticTLS
		}
		// ...but never a GD one; musl never gives dlopen'ed modules a
		// static offset valid for threads that existed at dlopen.
		return model, tlsvar.DynamicTLS
	}
	return model, tlsvar.DynamicTLS // after exhaustion: dynamic in both
}

// wantTable is the symbol table a cell's variable must be found in.
func wantTable(c threadpub.Cell) string {
	if c.SymtabOnly {
		return tlsvar.SymbolTableSymtab
	}
	return tlsvar.SymbolTableDynsym
}

func record(i int) threadpub.Record {
	r := threadpub.Record{Flags: uint8(i % 2), Attrs: map[uint8]string{0: "/api/v" + string(rune('0'+i)), 1: "GET"}}
	for j := range r.TraceID {
		r.TraceID[j] = byte(0x10*i + j + 1)
	}
	for j := range r.SpanID {
		r.SpanID[j] = byte(0xa0 + i + j)
	}
	if i == 2 {
		r.Attrs[2] = strings.Repeat("u", 200) // a long value: attrs beyond a first small read
	}
	return r
}

// readRecord reads the record a slot points at the way a reader does:
// header first, then exactly attrs_data_size more (bounded by the cap).
func readRecord(t *testing.T, mem remote.Memory, slot uint64) (uint64, threadctx.Record, error) {
	t.Helper()
	ptr, err := mem.ReadUint64(slot)
	if err != nil {
		t.Fatalf("reading the slot at %#x: %v", slot, err)
	}
	if ptr == 0 {
		return 0, threadctx.Record{}, nil
	}
	hdr := make([]byte, threadctx.HeaderSize, threadctx.DefaultReadCap)
	if err := mem.ReadAt(hdr, ptr); err != nil {
		t.Fatalf("reading the record header at %#x: %v", ptr, err)
	}
	n := min(threadctx.AttrsDataSize(hdr), threadctx.DefaultReadCap-threadctx.HeaderSize)
	buf := hdr[:threadctx.HeaderSize+n]
	if err := mem.ReadAt(buf[threadctx.HeaderSize:], ptr+threadctx.HeaderSize); err != nil {
		t.Fatalf("reading attrs_data: %v", err)
	}
	rec, err := threadctx.Parse(buf)
	return ptr, rec, err
}

// checkSlotRecord checks that loc finds the slot the thread reports and
// that the record there is want; what prefixes the SlotAddr failure.
func checkSlotRecord(t *testing.T, loc *tlsvar.Location, mem remote.Memory, tr threadpub.Truth, what string, want threadpub.Record) {
	t.Helper()
	if slot, err := loc.SlotAddr(mem, tr.ThreadPointer); err != nil || slot != tr.Slot {
		t.Fatalf("%sSlotAddr %#x, %v; thread says %#x", what, slot, err, tr.Slot)
	}
	_, rec, err := readRecord(t, mem, tr.Slot)
	if err != nil {
		t.Fatal(err)
	}
	checkRecord(t, rec, want)
}

func checkRecord(t *testing.T, got threadctx.Record, want threadpub.Record) {
	t.Helper()
	if got.TraceID != threadctx.TraceID(want.TraceID) || got.SpanID != threadctx.SpanID(want.SpanID) || got.TraceFlags != want.Flags {
		t.Errorf("record ids %s/%s flags %d, want %x/%x %d", got.TraceID, got.SpanID, got.TraceFlags, want.TraceID, want.SpanID, want.Flags)
	}
	if len(got.Attrs) != len(want.Attrs) || got.Truncated {
		t.Errorf("attrs %v (truncated %v), want %v", got.Attrs, got.Truncated, want.Attrs)
	}
	for _, a := range got.Attrs {
		if want.Attrs[a.KeyIndex] != a.Value {
			t.Errorf("attr %d = %q, want %q", a.KeyIndex, a.Value, want.Attrs[a.KeyIndex])
		}
	}
}

// TestMatrix resolves the variable in a running publisher for every cell
// and checks, for several parked threads, that SlotAddr(tp) is the address
// the thread itself reports and that the record read there is the one it
// published. Reading without ptrace is safe here only because the workers
// are parked; the ptrace conformance test does the same under ptrace-stop.
func TestMatrix(t *testing.T) {
	testenv.RequireRoot(t) // process_vm_readv, map_files
	for _, c := range threadpub.Matrix() {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			p := threadpub.Start(t, c)
			const workers = 3
			p.Threads(workers)
			truths := make([]threadpub.Truth, workers)
			for i := range truths {
				truths[i] = p.Set(i, record(i))
			}
			loc, err := tlsvar.Resolve("/proc", p.PID)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			t.Logf("%v", loc)
			wantModel, wantPlacement := expect(c)
			if loc.Model != wantModel || loc.Placement != wantPlacement {
				t.Errorf("model %v placement %v, want %v %v", loc.Model, loc.Placement, wantModel, wantPlacement)
			}
			wantLibc := tlsvar.Glibc
			if c.Libc == threadpub.Musl {
				wantLibc = tlsvar.Musl
			}
			if loc.Libc != wantLibc || loc.Arch != tlsvar.AMD64 {
				t.Errorf("libc %v arch %v", loc.Libc, loc.Arch)
			}
			wantModule := p.Exe
			if c.Where != threadpub.Exe {
				wantModule = p.Lib
			}
			if loc.Module != wantModule {
				t.Errorf("module %q, want %q", loc.Module, wantModule)
			}
			if want := wantTable(c); loc.SymbolTable != want {
				t.Errorf("symbol table %q, want %q", loc.SymbolTable, want)
			}
			mem := remote.Memory{PID: p.PID}
			for i, tr := range truths {
				slot, err := loc.SlotAddr(mem, tr.ThreadPointer)
				if err != nil {
					t.Fatalf("worker %d (tid %d): SlotAddr: %v", i, tr.TID, err)
				}
				if slot != tr.Slot {
					t.Fatalf("worker %d (tid %d): SlotAddr %#x, thread says %#x (tp %#x)", i, tr.TID, slot, tr.Slot, tr.ThreadPointer)
				}
				checkArea(t, c, loc, tr)
				ptr, rec, err := readRecord(t, mem, slot)
				if err != nil || ptr != tr.Record {
					t.Fatalf("worker %d: record at %#x (thread says %#x): %v", i, ptr, tr.Record, err)
				}
				checkRecord(t, rec, record(i))
			}
			// Republish (the swap writer changes buffers) and withdraw.
			tr := p.Set(0, record(3))
			if _, rec, err := readRecord(t, mem, tr.Slot); err != nil {
				t.Fatalf("after update: %v", err)
			} else {
				checkRecord(t, rec, record(3))
			}
			tr = p.Clear(1)
			slot, err := loc.SlotAddr(mem, tr.ThreadPointer)
			if err != nil || slot != tr.Slot {
				t.Fatalf("cleared worker: SlotAddr %#x, %v; want %#x", slot, err, tr.Slot)
			}
			ptr, _, err := readRecord(t, mem, slot)
			switch c.Writer {
			case threadpub.PointerSwap:
				if ptr != 0 {
					t.Errorf("swap writer cleared, pointer %#x", ptr)
				}
			case threadpub.ValidFlip:
				if ptr != tr.Record || !errors.Is(err, threadctx.ErrInvalid) {
					t.Errorf("flip writer cleared: pointer %#x (want %#x), err %v, want ErrInvalid", ptr, tr.Record, err)
				}
			}
			// The main thread touched the variable too (it existed before
			// any dlopen: its DTV was grown on that access).
			mt := p.Main()
			if slot, err := loc.SlotAddr(mem, mt.ThreadPointer); err != nil || slot != mt.Slot {
				t.Errorf("main thread: SlotAddr %#x, %v; thread says %#x", slot, err, mt.Slot)
			}
			checkUntouched(t, c, loc, p, mem)
		})
	}
}

// staticArea bounds how far from the thread pointer a static TLS block can
// be: glibc's whole static TLS area is a few KiB (libc's own TLS plus the
// surplus), musl's is the sum of the modules' sizes.
const staticArea = 64 << 10

// checkArea cross-checks the placement with where the thread itself sees
// its variable, independently of Location's arithmetic: static blocks sit
// just below the thread pointer (x86-64, variant II); glibc's dynamic
// blocks are malloc'ed on first access, far from it. (musl copies every
// module, dlopen'ed ones included, next to the thread pointer of threads
// created after the dlopen, so there only the DTV tells.)
func checkArea(t *testing.T, c threadpub.Cell, loc *tlsvar.Location, tr threadpub.Truth) {
	t.Helper()
	near := tr.Slot < tr.ThreadPointer && tr.ThreadPointer-tr.Slot <= staticArea
	switch {
	case loc.Placement == tlsvar.StaticTLS && !near:
		t.Errorf("static placement, but the thread sees its slot at %#x, tp %#x", tr.Slot, tr.ThreadPointer)
	case loc.Placement == tlsvar.DynamicTLS && c.Libc == threadpub.Glibc && near:
		t.Errorf("glibc dynamic placement, but the thread sees its slot in static TLS (%#x, tp %#x)", tr.Slot, tr.ThreadPointer)
	}
}

// checkUntouched looks at a thread that never accessed the variable.
func checkUntouched(t *testing.T, c threadpub.Cell, loc *tlsvar.Location, p *threadpub.Publisher, mem remote.Memory) {
	t.Helper()
	p.Threads(1)
	k := 3 // the workers of TestMatrix are 0..2
	tr := p.Info(k)
	slot, err := loc.SlotAddr(mem, tr.ThreadPointer)
	switch {
	case loc.Placement == tlsvar.StaticTLS:
		// Static TLS exists in every thread from its creation: the slot is
		// there and still NULL.
		if err != nil {
			t.Fatalf("untouched thread, static TLS: %v", err)
		}
	case c.Libc == threadpub.Glibc:
		// glibc allocates a dynamic block on the thread's first access
		// (__tls_get_addr / _dl_tlsdesc_dynamic): until then the DTV entry
		// is TLS_DTV_UNALLOCATED.
		if !errors.Is(err, tlsvar.ErrNotAllocated) {
			t.Fatalf("untouched thread, glibc dynamic TLS: slot %#x, err %v; want ErrNotAllocated", slot, err)
		}
		return
	default:
		// musl allocates every module's block when the thread is created.
		if err != nil {
			t.Fatalf("untouched thread, musl dynamic TLS: %v", err)
		}
	}
	if v, err := mem.ReadUint64(slot); err != nil || v != 0 {
		t.Errorf("untouched thread: slot %#x holds %#x, %v; want NULL", slot, v, err)
	}
}

// TestResolveErrors covers processes whose variable is absent or unusable.
func TestResolveErrors(t *testing.T) {
	testenv.RequireRoot(t)
	t.Run("self", func(t *testing.T) {
		if _, err := tlsvar.Resolve("/proc", os.Getpid()); !errors.Is(err, tlsvar.ErrNotFound) {
			t.Fatalf("Go test binary: %v, want ErrNotFound", err)
		}
	})
	for _, l := range testpub.Libcs {
		t.Run("processctx-publisher-"+string(l), func(t *testing.T) {
			p := testpub.Start(t, l)
			if _, err := tlsvar.Resolve("/proc", p.PID); !errors.Is(err, tlsvar.ErrNotFound) {
				t.Fatalf("publisher without thread context: %v, want ErrNotFound", err)
			}
		})
	}
	cases := []struct {
		variant threadpub.Variant
		reason  string
	}{
		{threadpub.NotTLS, "not STT_TLS"},
		{threadpub.Protected, "visibility is STV_PROTECTED"},
		{threadpub.Hidden, "visibility is STV_HIDDEN"},
		{threadpub.LocalDynamic, "Local Dynamic"},
	}
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		for _, tc := range cases {
			c := threadpub.Cell{Libc: l, Where: threadpub.Dlopen, Dialect: threadpub.GD, Variant: tc.variant}
			t.Run(c.String(), func(t *testing.T) {
				t.Parallel()
				p := threadpub.Start(t, c)
				_, err := tlsvar.Resolve("/proc", p.PID)
				if !errors.Is(err, tlsvar.ErrUnsupported) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("Resolve: %v; want ErrUnsupported mentioning %q", err, tc.reason)
				}
				t.Logf("%v", err)
			})
		}
	}
}

// BenchmarkResolve measures resolution of a glibc process whose variable is
// in a dlopen'ed library: cold (every ELF file parsed) and warm (a
// Resolver that has seen the files: maps, auxv, stat and a few remote reads).
func BenchmarkResolve(b *testing.B) {
	testenv.RequireRoot(b)
	for _, c := range []threadpub.Cell{
		{Libc: threadpub.Glibc, Where: threadpub.DlopenAfterExhaustion, Dialect: threadpub.TLSDESC},
		{Libc: threadpub.Musl, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC},
	} {
		p := threadpub.Start(b, c)
		b.Run(c.String()+"/cold", func(b *testing.B) {
			for b.Loop() {
				if _, err := tlsvar.NewResolver("/proc").Resolve(p.PID); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.String()+"/warm", func(b *testing.B) {
			r := tlsvar.NewResolver("/proc")
			for b.Loop() {
				if _, err := r.Resolve(p.PID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLateDlopen loads the library while workers already run, as a plugin
// loaded under an attached profiler would be: before the load the process
// has no variable; afterwards an old thread that never touched it has no
// block on glibc with dynamic TLS (its DTV predates the module), while
// glibc's static surplus and musl's eager allocation give it a NULL slot.
func TestLateDlopen(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		for _, where := range []threadpub.Where{threadpub.Dlopen, threadpub.DlopenAfterExhaustion} {
			for _, d := range []threadpub.Dialect{threadpub.TLSDESC, threadpub.GD} {
				c := threadpub.Cell{Libc: l, Where: where, Dialect: d, LateLoad: true}
				t.Run(c.String(), func(t *testing.T) {
					t.Parallel()
					p := threadpub.Start(t, c)
					p.Threads(2)
					if _, err := tlsvar.Resolve("/proc", p.PID); !errors.Is(err, tlsvar.ErrNotFound) {
						t.Fatalf("before dlopen: %v, want ErrNotFound", err)
					}
					p.Load()
					loc, err := tlsvar.Resolve("/proc", p.PID)
					if err != nil {
						t.Fatalf("after dlopen: %v", err)
					}
					wantModel, wantPlacement := expect(c)
					if loc.Model != wantModel || loc.Placement != wantPlacement {
						t.Errorf("%v; want %v %v", loc, wantModel, wantPlacement)
					}
					mem := remote.Memory{PID: p.PID}
					old := p.Info(0)
					slot, err := loc.SlotAddr(mem, old.ThreadPointer)
					if l == threadpub.Glibc && loc.Placement == tlsvar.DynamicTLS {
						if !errors.Is(err, tlsvar.ErrNotAllocated) {
							t.Fatalf("old untouched thread: slot %#x, %v; want ErrNotAllocated", slot, err)
						}
					} else if err != nil {
						t.Fatalf("old untouched thread: %v", err)
					} else if v, err := mem.ReadUint64(slot); err != nil || v != 0 {
						t.Fatalf("old untouched thread: slot %#x holds %#x, %v", slot, v, err)
					}
					tr := p.Set(1, record(1)) // an old thread touching it now
					checkSlotRecord(t, loc, mem, tr, "old thread after first use: ", record(1))
				})
			}
		}
	}
}

// TestExeAccess: the executable itself accesses the library's variable, so
// its .dynsym holds an undefined otel_thread_ctx_v1 and an Initial Exec
// relocation names it. The library's definition must still be chosen, and
// the library's own (TLSDESC / GD) relocations characterise the model.
func TestExeAccess(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		for _, d := range []threadpub.Dialect{threadpub.TLSDESC, threadpub.GD} {
			c := threadpub.Cell{Libc: l, Where: threadpub.SharedLib, Dialect: d, Variant: threadpub.ExeAccess}
			t.Run(c.String(), func(t *testing.T) {
				t.Parallel()
				p := threadpub.Start(t, c)
				p.Threads(1)
				tr := p.Set(0, record(0))
				loc, err := tlsvar.Resolve("/proc", p.PID)
				if err != nil {
					t.Fatal(err)
				}
				wantModel, wantPlacement := expect(c)
				if loc.Module != p.Lib || loc.Model != wantModel || loc.Placement != wantPlacement {
					t.Errorf("%v; want %s %v %v", loc, p.Lib, wantModel, wantPlacement)
				}
				checkSlotRecord(t, loc, remote.Memory{PID: p.PID}, tr, "", record(0))
			})
		}
	}
}

// TestSymtabVariants: executables that do not export the variable, static
// (plain -static) and dynamic (no -rdynamic). A file-static variable, the
// only definition, is found in .symtab and read; a stripped executable has
// no symbol table left and gives ErrNotFound, as before .symtab was read.
func TestSymtabVariants(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		for _, static := range []bool{true, false} {
			for _, v := range []threadpub.Variant{threadpub.FileLocal, threadpub.Stripped} {
				c := threadpub.Cell{Libc: l, Where: threadpub.Exe, Static: static, SymtabOnly: true, Variant: v}
				t.Run(c.String(), func(t *testing.T) {
					t.Parallel()
					p := threadpub.Start(t, c)
					p.Threads(1)
					tr := p.Set(0, record(0))
					loc, err := tlsvar.Resolve("/proc", p.PID)
					if v == threadpub.Stripped {
						if !errors.Is(err, tlsvar.ErrNotFound) || err.Error() != tlsvar.ErrNotFound.Error() {
							t.Fatalf("stripped: %v, %v; want the plain ErrNotFound", loc, err)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%v", loc)
					if loc.SymbolTable != tlsvar.SymbolTableSymtab || loc.Model != tlsvar.ModelLocalExec || loc.Placement != tlsvar.StaticTLS {
						t.Errorf("%v (table %s); want local-exec static from .symtab", loc, loc.SymbolTable)
					}
					checkSlotRecord(t, loc, remote.Memory{PID: p.PID}, tr, "", record(0))
				})
			}
		}
	}
}
