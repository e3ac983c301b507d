// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package threadpub drives testdata/threadpub.c: real processes whose threads
// publish OTEP 4947 records, in every cell of the TLS conformance matrix
// (libc × where the variable is defined × TLS dialect × writer). A worker
// parks in a futex after each command, so its record is stable while a
// reader looks. Use threadpub.Main in TestMain to share builds.
package threadpub

import (
	"fmt"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// SchemaVersion and KeyMap must match threadpub.c.
const SchemaVersion = "tlsdesc_v1_dev"

var KeyMap = []string{"http.route", "http.request.method", "user.id"}

// Libc is testpub's: the publishers are built the same way.
type Libc = testpub.Libc

const (
	Glibc = testpub.Glibc
	Musl  = testpub.Musl
)

type Where uint8

const (
	Exe                   Where = iota // in the executable (linked -rdynamic so it is in .dynsym)
	SharedLib                          // in libotelctx_tls.so, a DT_NEEDED of the executable
	Dlopen                             // in libotelctx_tls.so, dlopen'ed before the workers start
	DlopenAfterExhaustion              // dlopen'ed after filler libraries used up glibc's static TLS surplus
)

func (w Where) String() string {
	return [...]string{"exe", "sharedlib", "dlopen", "dlopen-exhausted"}[w]
}

type Dialect uint8

const (
	TLSDESC Dialect = iota // -mtls-dialect=gnu2
	GD                     // -mtls-dialect=gnu: legacy General Dynamic (__tls_get_addr)
)

func (d Dialect) String() string { return [...]string{"tlsdesc", "gd"}[d] }

// flag for goarch: aarch64 gcc spells the dialects desc and trad.
func (d Dialect) flag(goarch string) string {
	if goarch == "arm64" {
		return [...]string{"-mtls-dialect=desc", "-mtls-dialect=trad"}[d]
	}
	return [...]string{"-mtls-dialect=gnu2", "-mtls-dialect=gnu"}[d]
}

// Writer: OTEP 4947 allows both styles.
type Writer uint8

const (
	PointerSwap Writer = iota // NULL while building, then point at the new record
	ValidFlip                 // one record per thread, valid=0 while mutating
)

func (w Writer) String() string { return [...]string{"swap", "flip"}[w] }

// Variant builds deliberately wrong variables for negative tests.
type Variant uint8

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

type Cell struct {
	Libc    Libc
	Where   Where
	Dialect Dialect
	// Static (Where Exe): a static PIE, the only static kind with a .dynsym.
	Static bool
	// SymtabOnly (Where Exe): built as writers that do not export the variable
	// are: plain -static with Static, else dynamic without -rdynamic.
	SymtabOnly bool
	Writer     Writer
	Variant    Variant
	NoContext  bool
	// LateLoad (Dlopen cells): Publisher.Load dlopens later, as a plugin loaded
	// under a running profiler would be.
	LateLoad bool
}

func (c Cell) String() string {
	s := fmt.Sprintf("%s/%s/%s/%s", c.Libc.Name(), c.Where, c.Dialect, c.Writer)
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

// Matrix: {glibc, musl} × {exe, shared lib, dlopen, dlopen after exhaustion}
// × {TLSDESC, GD}, plus static PIE and .symtab-only executables, × both writers.
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

// SourceDir holds the C publishers (the top-level testdata/publishers).
func SourceDir() string { return testenv.Testdata("publishers") }
