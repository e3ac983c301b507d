// Package tlsvar locates an exported ELF TLS variable (otel_thread_ctx_v1,
// OTEP 4947) in a running process: which module defines it, how it is
// accessed, and how to turn a thread's thread pointer into the variable's
// address. Resolution is done once per process (and again when its mappings
// change); turning a thread pointer into an address is cheap.
package tlsvar

import "errors"

// SymbolName is the OTEP 4947 thread-context variable.
const SymbolName = "otel_thread_ctx_v1"

// Sentinel errors.
var (
	// ErrNotFound: no loaded module exports the symbol.
	ErrNotFound = errors.New("otel_thread_ctx_v1 not exported by any loaded module")
	// ErrUnsupported: the symbol exists but cannot be read (Local Dynamic,
	// not STT_TLS, hidden, unknown libc layout, ...). Wrapped with the reason.
	ErrUnsupported = errors.New("unsupported thread-local variable")
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

// Libc is the C library (dynamic linker) whose structures were read.
type Libc uint8

// C libraries.
const (
	LibcUnknown Libc = iota
	Glibc
	Musl
)

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

// Placement says where the module's TLS block lives.
type Placement uint8

// Placements.
const (
	StaticTLS  Placement = iota + 1 // at a fixed offset from the thread pointer
	DynamicTLS                      // through the thread's DTV
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
	// SymOffset is the symbol's st_value: its offset in the module's TLS block.
	SymOffset uint64
	// StaticTLS: variable address = tp + TPOffset (TPOffset includes SymOffset).
	TPOffset int64
	// DynamicTLS: dtv = *(tp + DTVPointerOffset); block = dtv[ModuleID]
	// (entry size DTVEntrySize); variable address = block + SymOffset.
	ModuleID         uint64
	DTVPointerOffset int64
	DTVEntrySize     uint64
}

// Resolve finds otel_thread_ctx_v1 in process pid (procRoot is normally
// "/proc"; files are read through procRoot/PID/root or map_files so that
// processes in containers work).
func Resolve(procRoot string, pid int) (*Location, error) {
	return nil, errors.New("tlsvar.Resolve: not implemented yet")
}

// SlotAddr returns the address of the variable for the thread whose thread
// pointer is tp. For DynamicTLS it reads the thread's DTV through mem and
// returns ErrNotAllocated when the block does not exist yet.
func (l *Location) SlotAddr(mem Memory, tp uint64) (uint64, error) {
	return 0, errors.New("tlsvar.SlotAddr: not implemented yet")
}
