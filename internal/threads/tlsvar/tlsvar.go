// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package tlsvar locates the OTEP 4947 TLS variable otel_thread_ctx_v1 in a
// running process, once per process, as plain data (an eBPF program can be
// handed the same recipe), and turns a stopped thread's thread pointer into
// the variable's address, reading at most three words. README.md describes
// the resolution, including why placement is read from the dynamic linker
// (glibc gives dlopen'ed TLSDESC modules static TLS while its surplus lasts).
//
//	loc, err := tlsvar.Resolve("/proc", pid) // ErrNotFound, ErrUnsupported, ErrTransient (do not cache)
//	slot, err := loc.SlotAddr(mem, tp)       // per stopped thread; ErrNotAllocated: never touched the module
package tlsvar

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

const SymbolName = "otel_thread_ctx_v1"

// NodeSymbolName is the variable of the nodejs_v1_dev schema (@datadog/pprof's
// addon): four words leading to the record, not a pointer to it (package nodectx).
const NodeSymbolName = "otel_thread_ctx_nodejs_v1"

var (
	ErrNotFound = errors.New("otel_thread_ctx_v1 not exported by any loaded module")
	// ErrUnsupported wraps the reason (Local Dynamic, hidden, unknown libc layout, ...).
	ErrUnsupported = errors.New("unsupported thread-local variable")
	// ErrTransient: nothing was learned about the files (process exited, out of
	// descriptors, I/O error): resolve again rather than keep the failure.
	ErrTransient    = errors.New("transient failure reading the process's files")
	ErrNotAllocated = errors.New("TLS block not allocated for this thread")
)

type Arch uint8

const (
	AMD64 Arch = iota + 1 // TLS variant II, thread pointer fs_base
	ARM64                 // TLS variant I, thread pointer TPIDR_EL0
)

func (a Arch) String() string {
	switch a {
	case AMD64:
		return "amd64"
	case ARM64:
		return "arm64"
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

type Libc uint8

const (
	LibcUnknown Libc = iota
	Glibc
	Musl
)

func (l Libc) String() string {
	switch l {
	case Glibc:
		return "glibc"
	case Musl:
		return "musl"
	}
	return "unknown"
}

// Model is classified from the relocations that reference the variable.
type Model uint8

const (
	ModelUnknown        Model = iota
	ModelTLSDESC              // R_X86_64_TLSDESC / R_AARCH64_TLSDESC
	ModelGeneralDynamic       // DTPMOD64 + DTPOFF64 against the symbol
	ModelInitialExec          // TPOFF64 against the symbol
	ModelLocalExec            // resolved at link time in the executable
	ModelLocalDynamic         // unsupported
)

func (m Model) String() string {
	switch m {
	case ModelTLSDESC:
		return "TLSDESC"
	case ModelGeneralDynamic:
		return "general-dynamic"
	case ModelInitialExec:
		return "initial-exec"
	case ModelLocalExec:
		return "local-exec"
	case ModelLocalDynamic:
		return "local-dynamic"
	}
	return "unknown"
}

type Placement uint8

const (
	StaticTLS  Placement = iota + 1 // at a fixed offset from the thread pointer
	DynamicTLS                      // through the thread's DTV
)

func (p Placement) String() string {
	switch p {
	case StaticTLS:
		return "static"
	case DynamicTLS:
		return "dynamic"
	}
	return "unknown"
}

const (
	SymbolTableDynsym = "dynsym"
	// SymbolTableSymtab: not exported, found in the executable's .symtab (e.g.
	// a plain -static build).
	SymbolTableSymtab = "symtab"
)

type Memory interface {
	ReadAt(p []byte, addr uint64) error
	ReadUint64(addr uint64) (uint64, error)
}

// Location is one process's resolution.
type Location struct {
	Arch      Arch
	Libc      Libc
	Model     Model
	Placement Placement
	Module    string
	// Symbol is the variable found: SymbolName or NodeSymbolName.
	Symbol string
	// ModuleBase is the load bias: addresses are ModuleBase + st_value.
	ModuleBase uint64
	// SymOffset is st_value: the offset in the module's TLS block.
	SymOffset   uint64
	SymbolTable string
	// StaticTLS: address = tp + TPOffset (TPOffset includes SymOffset).
	TPOffset int64
	// DynamicTLS: address = (*(tp + DTVPointerOffset))[ModuleID] + SymOffset.
	ModuleID         uint64
	DTVPointerOffset int64
	DTVEntrySize     uint64
	// DTVCountOffset locates the DTV's length: an id beyond it means the
	// thread's DTV predates the module.
	DTVCountOffset int64
	// DTVUnallocated is the entry value (besides 0) meaning "not allocated yet".
	DTVUnallocated uint64
}

func (l *Location) String() string {
	if l.Placement == StaticTLS {
		return fmt.Sprintf("%s %s %s in %s%s: static, tp%+d", l.Arch, l.Libc, l.Model, l.Module, l.fromSymtab(), l.TPOffset)
	}
	return fmt.Sprintf("%s %s %s in %s%s: dynamic, module %d + %#x (dtv at tp%+d)", l.Arch, l.Libc, l.Model, l.Module, l.fromSymtab(),
		l.ModuleID, l.SymOffset, l.DTVPointerOffset)
}

func (l *Location) fromSymtab() string {
	if l.SymbolTable == SymbolTableSymtab {
		return " (.symtab)"
	}
	return ""
}

// Resolve shares one Resolver per procRoot, so each ELF file is parsed once
// per reader process, not once per target.
func Resolve(procRoot string, pid int) (*Location, error) {
	return ResolveContext(context.Background(), procRoot, pid)
}

// ResolveContext is Resolve for a caller that may give up: once ctx is
// done the resolution stops reading and allocating (ErrTransient).
func ResolveContext(ctx context.Context, procRoot string, pid int) (*Location, error) {
	r, _ := sharedResolvers.Load(procRoot)
	if r == nil {
		r, _ = sharedResolvers.LoadOrStore(procRoot, NewResolver(procRoot))
	}
	return r.(*Resolver).ResolveContext(ctx, pid)
}

var sharedResolvers sync.Map // procRoot -> *Resolver

// maxDTV: more loaded TLS modules than this is garbage.
const maxDTV = 1 << 16

func (l *Location) SlotAddr(mem Memory, tp uint64) (uint64, error) {
	if tp == 0 {
		return 0, errors.New("tlsvar: thread pointer is 0")
	}
	switch l.Placement {
	case StaticTLS:
		return tp + uint64(l.TPOffset), nil
	case DynamicTLS:
	default:
		return 0, fmt.Errorf("tlsvar: location has no placement")
	}
	if l.ModuleID == 0 || l.ModuleID > maxDTV || l.DTVEntrySize == 0 {
		return 0, fmt.Errorf("tlsvar: bad dynamic location (module %d, entry %d)", l.ModuleID, l.DTVEntrySize)
	}
	dtv, err := mem.ReadUint64(tp + uint64(l.DTVPointerOffset))
	if err != nil {
		return 0, fmt.Errorf("reading DTV pointer: %w", err)
	}
	if dtv == 0 {
		return 0, fmt.Errorf("%w: thread has no DTV", ErrNotAllocated)
	}
	n, err := mem.ReadUint64(dtv + uint64(l.DTVCountOffset))
	if err != nil {
		return 0, fmt.Errorf("reading DTV length: %w", err)
	}
	if l.ModuleID > n {
		// The DTV was sized before the module loaded and the thread has not
		// touched it since (glibc grows it on first access).
		return 0, fmt.Errorf("%w: module %d beyond DTV length %d", ErrNotAllocated, l.ModuleID, n)
	}
	block, err := mem.ReadUint64(dtv + l.ModuleID*l.DTVEntrySize)
	if err != nil {
		return 0, fmt.Errorf("reading DTV entry %d: %w", l.ModuleID, err)
	}
	if block == 0 || (l.DTVUnallocated != 0 && block == l.DTVUnallocated) {
		return 0, fmt.Errorf("%w: DTV entry %d is %#x", ErrNotAllocated, l.ModuleID, block)
	}
	return block + l.SymOffset, nil
}
