// Package tlsvar locates an exported ELF TLS variable (otel_thread_ctx_v1,
// OTEP 4947) in a running process: which module defines it, how it is
// accessed, and how to turn a thread's thread pointer into the variable's
// address. Resolution is done once per process (and again when its mappings
// change); turning a thread pointer into an address is cheap.
//
// Use:
//
//	loc, err := tlsvar.Resolve("/proc", pid) // or a long-lived NewResolver("/proc").Resolve(pid)
//	// errors.Is(err, tlsvar.ErrNotFound): the process does not publish thread context
//	// errors.Is(err, tlsvar.ErrUnsupported): it does, in a way we cannot read (reason wrapped)
//	// errors.Is(err, tlsvar.ErrTransient): try again later (do not cache the failure)
//	mem := remote.Memory{PID: pid}
//	// for each thread, while it is stopped (ptrace.EachThread gives Stopped.ThreadPointer):
//	slot, err := loc.SlotAddr(mem, tp) // ErrNotAllocated: this thread never touched the module
//	ptr, _ := mem.ReadUint64(slot)     // 0: no active record
//	// read threadctx.HeaderSize bytes at ptr, then AttrsDataSize more, and threadctx.Parse
//
// The symbol comes from .dynsym (else the executable's .symtab), the access
// model from the relocations naming it, and the placement from the dynamic
// linker's own bookkeeping, since glibc gives dlopen'ed TLSDESC modules
// static TLS while its surplus lasts. README.md in this directory has the
// details.
//
// Location is plain data (an eBPF program can be handed the same recipe).
// SlotAddr reads at most three words of the target (DTV pointer, DTV
// length, DTV entry) and nothing for static TLS.
package tlsvar

import (
	"errors"
	"fmt"
	"sync"
)

// SymbolName is the OTEP 4947 thread-context variable.
const SymbolName = "otel_thread_ctx_v1"

// Sentinel errors.
var (
	// ErrNotFound: no loaded module exports the symbol.
	ErrNotFound = errors.New("otel_thread_ctx_v1 not exported by any loaded module")
	// ErrUnsupported: the symbol exists but cannot be read (Local Dynamic,
	// not STT_TLS, hidden, unknown libc layout, ...). Wrapped with the reason.
	ErrUnsupported = errors.New("unsupported thread-local variable")
	// ErrTransient: the resolution failed for a reason that may not hold
	// next time (the process exited while being resolved, the reader ran
	// out of file descriptors, an I/O error). Nothing was learned about the
	// process's files; resolve again later rather than keeping the failure.
	ErrTransient = errors.New("transient failure reading the process's files")
	// ErrNotAllocated: the thread has not allocated the module's dynamic TLS
	// block yet, so its variable still holds the initial NULL.
	ErrNotAllocated = errors.New("TLS block not allocated for this thread")
)

// Arch is the target's instruction set.
type Arch uint8

// Supported architectures.
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

// Libc is the C library (dynamic linker) whose structures were read.
type Libc uint8

// C libraries.
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

// Model is the TLS access model the variable is accessed with, as
// classified from the relocations that reference it.
type Model uint8

// Access models.
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

// Placement says where the module's TLS block lives.
type Placement uint8

// Placements.
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

// Symbol tables the variable can come from (Location.SymbolTable).
const (
	// SymbolTableDynsym: exported, as OTEP 4947 asks.
	SymbolTableDynsym = "dynsym"
	// SymbolTableSymtab: not exported; found in the executable's .symtab
	// (a writer that does not follow the OTEP, e.g. a plain -static build).
	SymbolTableSymtab = "symtab"
)

// Memory reads the target's address space (remote.Memory satisfies it).
type Memory interface {
	ReadAt(p []byte, addr uint64) error
	ReadUint64(addr uint64) (uint64, error)
}

// Location is the result of resolving the variable in one process. It is
// plain data so that an eBPF program can be given the same recipe.
type Location struct {
	Arch      Arch
	Libc      Libc
	Model     Model
	Placement Placement
	// Module is the path (as mapped) of the object defining the symbol.
	Module string
	// ModuleBase is the module's load bias (st_value-relative addresses in
	// the module are ModuleBase + value).
	ModuleBase uint64
	// SymOffset is the symbol's st_value: its offset in the module's TLS block.
	SymOffset uint64
	// SymbolTable is the table the symbol was found in: SymbolTableDynsym,
	// or SymbolTableSymtab when the executable does not export it.
	SymbolTable string
	// StaticTLS: variable address = tp + TPOffset (TPOffset includes SymOffset).
	TPOffset int64
	// DynamicTLS: dtv = *(tp + DTVPointerOffset); block = dtv[ModuleID]
	// (entry size DTVEntrySize); variable address = block + SymOffset.
	// ModuleID is also filled in for StaticTLS when the libc says it
	// (informative only there).
	ModuleID         uint64
	DTVPointerOffset int64
	DTVEntrySize     uint64
	// DTVCountOffset is where, relative to the DTV pointer, the DTV's
	// number of entries is kept (glibc: -16, dtv[-1].counter; musl: 0,
	// dtv[0]); an id beyond it means the thread's DTV predates the module.
	DTVCountOffset int64
	// DTVUnallocated is the entry value (besides 0) meaning "not allocated
	// yet" (glibc: TLS_DTV_UNALLOCATED, (void*)-1; musl: none, 0).
	DTVUnallocated uint64
}

func (l *Location) String() string {
	if l.Placement == StaticTLS {
		return fmt.Sprintf("%s %s %s in %s%s: static, tp%+d", l.Arch, l.Libc, l.Model, l.Module, l.fromSymtab(), l.TPOffset)
	}
	return fmt.Sprintf("%s %s %s in %s%s: dynamic, module %d + %#x (dtv at tp%+d)", l.Arch, l.Libc, l.Model, l.Module, l.fromSymtab(),
		l.ModuleID, l.SymOffset, l.DTVPointerOffset)
}

// fromSymtab marks, in String, a variable the executable does not export.
func (l *Location) fromSymtab() string {
	if l.SymbolTable == SymbolTableSymtab {
		return " (.symtab)"
	}
	return ""
}

// Resolve finds otel_thread_ctx_v1 in process pid (procRoot is normally
// "/proc"; files are read through procRoot/PID/root or map_files so that
// processes in containers work). It reads the target's memory with
// process_vm_readv. It uses one shared Resolver per procRoot, so what was
// learned from each ELF file (libc, ld.so, the application's binaries) is
// parsed once per reader process, not once per target.
func Resolve(procRoot string, pid int) (*Location, error) {
	r, _ := sharedResolvers.Load(procRoot)
	if r == nil {
		r, _ = sharedResolvers.LoadOrStore(procRoot, NewResolver(procRoot))
	}
	return r.(*Resolver).Resolve(pid)
}

var sharedResolvers sync.Map // procRoot -> *Resolver

// maxDTV bounds module ids: more loaded TLS modules than this is garbage.
const maxDTV = 1 << 16

// SlotAddr returns the address of the variable for the thread whose thread
// pointer is tp. For DynamicTLS it reads the thread's DTV through mem and
// returns ErrNotAllocated when the block does not exist yet.
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
		// The thread's DTV was sized before the module was loaded and it has
		// not touched the module since (glibc grows it on first access).
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
