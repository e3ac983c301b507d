// Package threadpub compiles and drives the C thread-context publisher in
// testdata/threadpub: real processes whose threads publish OTEP 4947
// records through otel_thread_ctx_v1, in every cell of the TLS conformance
// matrix (libc × where the variable is defined × TLS dialect × writer).
//
// Typical use (see internal/scan/tlsvar's tests):
//
//	func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) } // share builds, remove them at the end
//
//	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC})
//	p.Threads(3)                                   // workers 0..2, parked
//	truth := p.Set(0, threadpub.Record{TraceID: ..., SpanID: ..., Flags: 1, Attrs: map[uint8]string{0: "/api"}})
//	// truth.TID, truth.ThreadPointer, truth.Slot (&otel_thread_ctx_v1 in
//	// that thread), truth.Record (what the slot points at). The worker is
//	// parked in a futex until the next command for it, so its record is
//	// stable while a reader looks (with or without ptrace).
//
// The process also publishes an OTEP 4719 process context with
// threadlocal.schema_version=tlsdesc_v1_dev and
// threadlocal.attribute_key_map=[http.route, http.request.method, user.id].
package threadpub

import (
	"fmt"
	"path/filepath"
	"runtime"
)

// The thread-local reference data the publisher puts in its process
// context (must match threadpub.c).
const SchemaVersion = "tlsdesc_v1_dev"

// KeyMap is the published threadlocal.attribute_key_map: Record.Attrs keys
// index it.
var KeyMap = []string{"http.route", "http.request.method", "user.id"}

// Libc selects the compiler driver, and so the C library.
type Libc string

// The C libraries.
const (
	Glibc Libc = "gcc"      // the system compiler, glibc
	Musl  Libc = "musl-gcc" // musl-tools' wrapper
)

// Where the variable is defined.
type Where uint8

// Placements of otel_thread_ctx_v1.
const (
	Exe                   Where = iota // in the executable (linked -rdynamic so it is in .dynsym)
	SharedLib                          // in libotelctx_tls.so, a DT_NEEDED of the executable
	Dlopen                             // in libotelctx_tls.so, dlopen'ed before the workers start
	DlopenAfterExhaustion              // dlopen'ed after filler libraries used up glibc's static TLS surplus
)

func (w Where) String() string {
	return [...]string{"exe", "sharedlib", "dlopen", "dlopen-exhausted"}[w]
}

// Dialect is the TLS dialect the library (or executable) is compiled with.
type Dialect uint8

// Dialects.
const (
	TLSDESC Dialect = iota // -mtls-dialect=gnu2
	GD                     // -mtls-dialect=gnu: legacy General Dynamic (__tls_get_addr)
)

func (d Dialect) String() string { return [...]string{"tlsdesc", "gd"}[d] }

func (d Dialect) flag() string { return [...]string{"-mtls-dialect=gnu2", "-mtls-dialect=gnu"}[d] }

// Writer is how worker threads update their record (OTEP 4947 allows both).
type Writer uint8

// Writer styles.
const (
	PointerSwap Writer = iota // NULL while building, then point at the new record
	ValidFlip                 // one record per thread, valid=0 while mutating
)

func (w Writer) String() string { return [...]string{"swap", "flip"}[w] }

// Variant builds deliberately wrong variables for negative tests.
type Variant uint8

// Variants.
const (
	Normal       Variant = iota
	NotTLS               // a plain global named otel_thread_ctx_v1 (STT_OBJECT)
	Protected            // STT_TLS but protected visibility
	Hidden               // the Protected build with its .dynsym entry patched to STV_HIDDEN
	LocalDynamic         // exported, but only accessed with Local Dynamic (DTPMOD64 against symbol 0); forces -mtls-dialect=gnu
	ExeAccess            // SharedLib only: the executable also accesses the variable directly (undefined in its .dynsym, Initial Exec TPOFF64)
	Stripped             // SymtabOnly only: the executable is stripped, so the variable is in no symbol table
	FileLocal            // SymtabOnly only: the variable is file-static (STB_LOCAL in .symtab)
)

func (v Variant) String() string {
	return [...]string{"", "nottls", "protected", "hidden", "localdynamic", "exeaccess", "stripped", "filelocal"}[v]
}

// Cell is one configuration of the conformance matrix.
type Cell struct {
	Libc    Libc
	Where   Where
	Dialect Dialect
	// Static links the executable statically (Where must be Exe): a
	// static PIE, the only static kind that keeps a .dynsym.
	Static bool
	// SymtabOnly (Where Exe) builds the executable the way writers that
	// do not export the variable are built, so that it is only in
	// .symtab: with Static, plain -static (non-PIE, no .dynsym at all,
	// --export-dynamic-symbol notwithstanding); without, a dynamic
	// executable linked without -rdynamic.
	SymtabOnly bool
	Writer     Writer
	Variant    Variant
	// NoContext skips publishing the process context.
	NoContext bool
	// LateLoad (Dlopen cells) loads nothing at start-up: Publisher.Load
	// dlopens the fillers and the library later, e.g. after workers exist,
	// as a plugin loaded while a profiler is already watching would be.
	LateLoad bool
}

func (c Cell) String() string {
	s := fmt.Sprintf("%s/%s/%s/%s", libcName(c.Libc), c.Where, c.Dialect, c.Writer)
	if c.Static {
		s += "/static"
	}
	if c.SymtabOnly {
		s += "/symtab"
	}
	if c.Variant != Normal {
		s += "/" + c.Variant.String()
	}
	if c.LateLoad {
		s += "/late"
	}
	return s
}

func libcName(l Libc) string {
	if l == Musl {
		return "musl"
	}
	return "glibc"
}

// Matrix is the conformance matrix: {glibc, musl} × {exe, shared lib,
// dlopen, dlopen after exhaustion} × {TLSDESC, GD}, plus, for each libc, a
// static PIE executable, and two whose variable is only in .symtab (a
// static non-PIE one and a dynamic one not linked -rdynamic), each with
// both writer styles.
func Matrix() []Cell {
	var out []Cell
	for _, w := range []Writer{PointerSwap, ValidFlip} {
		for _, l := range []Libc{Glibc, Musl} {
			for _, where := range []Where{Exe, SharedLib, Dlopen, DlopenAfterExhaustion} {
				for _, d := range []Dialect{TLSDESC, GD} {
					out = append(out, Cell{Libc: l, Where: where, Dialect: d, Writer: w})
				}
			}
		}
		out = append(out, Cell{Libc: Glibc, Where: Exe, Dialect: TLSDESC, Static: true, Writer: w})
		out = append(out, Cell{Libc: Musl, Where: Exe, Dialect: TLSDESC, Static: true, Writer: w})
		for _, l := range []Libc{Glibc, Musl} {
			out = append(out, Cell{Libc: l, Where: Exe, Dialect: TLSDESC, Static: true, SymtabOnly: true, Writer: w})
			out = append(out, Cell{Libc: l, Where: Exe, Dialect: TLSDESC, SymtabOnly: true, Writer: w})
		}
	}
	return out
}

// SourceDir is testdata/threadpub.
func SourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "threadpub")
}
