// Package safemem reads another process's memory only where the read
// cannot block on a file system.
//
// A publisher chooses the addresses otelctx reads: the process context's
// payload pointer, a thread's record pointer. process_vm_readv of a page
// that is not resident faults it in; in a mapping of a file on FUSE (or a
// network file system) that waits for the file system, for as long as its
// server likes, and holds the reader's goroutine (and, under ptrace, the
// stopped thread) that long. The OpenTelemetry SDKs put these in memory
// they allocate (heap, anonymous mappings, the OTEL_CTX memfd), so a read
// elsewhere is refused instead, unless every page of it is resident (a
// page in the process's page tables is read without faulting: memory the
// process wrote in a private file mapping, such as the tail of a data
// segment that musl's malloc hands out). A resident page of a file can
// still be reclaimed between the check and the read; that window is the
// residual risk.
package safemem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
)

// ErrFileBacked: the range is (partly) in a mapping of a regular file, in
// pages not in the process's page tables: reading them would go to the
// file. A range not (fully) mapped gets remote.ErrBadAddress, as the read
// would.
var ErrFileBacked = errors.New("not in anonymous memory (a read of a file-backed mapping may block on its file system)")

// maxSpans bounds the ranges remembered per process; beyond it the oldest
// is forgotten (a process's payloads and records live in a few regions:
// the heap, an arena or two, the OTEL_CTX mapping).
const maxSpans = 8

type span struct{ start, end uint64 }

// Memory is the address space of one process, read through remote.Memory
// within memory not backed by a regular file. It is not safe for
// concurrent use.
type Memory struct {
	mem      remote.Memory
	procRoot string
	safe     []span
	// MapsReads counts the reads of /proc/PID/maps: one per range outside
	// what was already found safe.
	MapsReads int
}

// New returns the memory of pid; procRoot is the procfs mount ("" means
// "/proc").
func New(procRoot string, pid int) *Memory {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Memory{mem: remote.Memory{PID: pid}, procRoot: procRoot}
}

// ReadAt reads len(p) bytes at addr, or refuses with ErrFileBacked (or
// remote.ErrBadAddress for a range not mapped).
func (m *Memory) ReadAt(p []byte, addr uint64) error {
	if err := m.check(addr, uint64(len(p))); err != nil {
		return err
	}
	return m.mem.ReadAt(p, addr)
}

// ReadUint64 reads one native-endian 64-bit word at addr.
func (m *Memory) ReadUint64(addr uint64) (uint64, error) {
	if err := m.check(addr, 8); err != nil {
		return 0, err
	}
	return m.mem.ReadUint64(addr)
}

func (m *Memory) check(addr, n uint64) error {
	if n == 0 {
		return nil
	}
	for _, s := range m.safe {
		if addr >= s.start && addr+n <= s.end && addr+n > addr {
			return nil
		}
	}
	m.MapsReads++
	maps, err := procmaps.Covering(m.procRoot, m.mem.PID, addr, n)
	if err != nil {
		return fmt.Errorf("pid %d: %w", m.mem.PID, err)
	}
	// The mappings must cover the range without a gap, and every one must
	// be memory of the process, not of a file.
	at := addr
	allAnon := true
	for _, mp := range maps {
		if mp.Start > at {
			break
		}
		if !Anonymous(mp) {
			// A file mapping's pages that are in the process's page
			// tables are read without the file system: a private mapping
			// the process wrote to (musl's malloc hands out the tail of a
			// data segment's last page) or pages it touched. Checked each
			// time: residency does not last.
			allAnon = false
			if err := m.resident(max(addr, mp.Start), min(addr+n, mp.End)); err != nil {
				return fmt.Errorf("pid %d: %d bytes at %#x, mapping %q: %w", m.mem.PID, n, addr, mp.Name, err)
			}
		}
		at = mp.End
	}
	if at < addr+n || addr+n < addr {
		// What the read itself would have said.
		return fmt.Errorf("pid %d: %d bytes at %#x: %w", m.mem.PID, n, addr, remote.ErrBadAddress)
	}
	if !allAnon {
		return nil
	}
	// Remember the whole run of mappings: the next payload or record is
	// likely in the same heap or arena.
	s := span{start: maps[0].Start, end: at}
	if len(m.safe) == maxSpans {
		m.safe = append(m.safe[:0], m.safe[1:]...)
	}
	m.safe = append(m.safe, s)
	return nil
}

// maxResidencyPages bounds the pages of a file mapping checked per read
// (64 KiB, the largest payload, spans at most 17 pages of 4 KiB).
const maxResidencyPages = 64

// resident checks in /proc/PID/pagemap that every page of [start, end) is
// present (bit 63), so reading it cannot fault in from a file.
func (m *Memory) resident(start, end uint64) error {
	page := uint64(os.Getpagesize())
	first, last := start/page, (end-1)/page
	npages := last - first + 1
	if npages > maxResidencyPages {
		return fmt.Errorf("%d pages of a file mapping: %w", npages, ErrFileBacked)
	}
	f, err := os.Open(m.procRoot + "/" + strconv.Itoa(m.mem.PID) + "/pagemap")
	if err != nil {
		return err
	}
	defer f.Close()
	var buf [maxResidencyPages * 8]byte
	b := buf[:npages*8]
	if _, err := f.ReadAt(b, int64(first*8)); err != nil {
		return fmt.Errorf("pagemap: %w", err)
	}
	for i := range npages {
		if binary.NativeEndian.Uint64(b[i*8:])&(1<<63) == 0 {
			return fmt.Errorf("page %#x not resident: %w", (first+i)*page, ErrFileBacked)
		}
	}
	return nil
}

// Anonymous reports whether a mapping is memory of the process rather than
// of a regular file: plain anonymous memory, a pseudo-mapping such as
// [heap], [stack] or [anon:NAME], a memfd (shmem), or System V or
// /dev/zero shared memory.
func Anonymous(m procmaps.Mapping) bool {
	switch {
	case m.Name == "", strings.HasPrefix(m.Name, "["):
		return true
	case strings.HasPrefix(m.Name, "/memfd:"), strings.HasPrefix(m.Name, "/SYSV"), strings.HasPrefix(m.Name, "/dev/zero"):
		return true
	}
	return false
}
