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
// still be reclaimed between the check and the read, and a process can
// remap its memory between the look at its mappings and the read: those
// windows are the residual risk (a hostile process has to hit them).
package safemem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
)

// ErrFileBacked: the range is (partly) in a mapping of a regular file, in
// pages not in the process's page tables: reading them would go to the
// file. A range not (fully) mapped gets remote.ErrBadAddress, as the read
// would.
var ErrFileBacked = errors.New("not in anonymous memory (a read of a file-backed mapping may block on its file system)")

// maxRegions bounds the mappings remembered of a process (a JVM has tens
// of thousands; adjacent anonymous ones are merged). Past it, the rest of
// the address space is treated as unmapped.
const maxRegions = 1 << 18

// region is a run of mappings: anonymous memory, or one file mapping.
type region struct {
	start, end uint64
	anon       bool
}

// Memory is the address space of one process, read through remote.Memory
// within memory not backed by a regular file, as the process's mappings
// were when they were last read: a Memory is meant for one round of reads
// (a process-context read, a thread snapshot), since a process can remap
// its memory at any time. It is not safe for concurrent use.
type Memory struct {
	mem      remote.Memory
	procRoot string
	regions  []region
	loaded   bool
	// MapsReads counts the reads of /proc/PID/maps: the first check, and
	// one more when a range falls outside the mappings known (mapped
	// since). PagemapReads counts residency checks of file-mapped pages.
	MapsReads, PagemapReads int
}

// New returns the memory of pid; procRoot is the procfs mount ("" means
// "/proc").
func New(procRoot string, pid int) *Memory {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Memory{mem: remote.Memory{PID: pid}, procRoot: procRoot}
}

// Load reads the process's mappings now, so that the reads that follow
// (for instance while a thread is stopped) need not.
func (m *Memory) Load() error {
	m.MapsReads++
	m.regions = m.regions[:0]
	m.loaded = true
	err := procmaps.EachDev(m.procRoot, m.mem.PID, func(start, end uint64, dev procmaps.Dev, inode uint64, name []byte) {
		anon := anonymousMapping(name, dev, inode)
		if k := len(m.regions) - 1; k >= 0 && anon && m.regions[k].anon && m.regions[k].end == start {
			m.regions[k].end = end
			return
		}
		if len(m.regions) < maxRegions {
			m.regions = append(m.regions, region{start: start, end: end, anon: anon})
		}
	})
	if err != nil {
		m.loaded = false
		return fmt.Errorf("pid %d: %w", m.mem.PID, err)
	}
	return nil
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
	end := addr + n
	if end < addr {
		return fmt.Errorf("pid %d: %d bytes at %#x: %w", m.mem.PID, n, addr, remote.ErrBadAddress)
	}
	if !m.loaded {
		if err := m.Load(); err != nil {
			return err
		}
	}
	ok, err := m.covered(addr, end)
	if !ok && err == nil {
		// Mapped since the mappings were read, perhaps: once more.
		if err := m.Load(); err != nil {
			return err
		}
		ok, err = m.covered(addr, end)
	}
	if err != nil {
		return fmt.Errorf("pid %d: %d bytes at %#x: %w", m.mem.PID, n, addr, err)
	}
	if !ok {
		// What the read itself would have said.
		return fmt.Errorf("pid %d: %d bytes at %#x: %w", m.mem.PID, n, addr, remote.ErrBadAddress)
	}
	return nil
}

// covered reports whether the known regions cover [addr, end) without a
// gap; an error says a file-mapped part of it is not resident.
func (m *Memory) covered(addr, end uint64) (bool, error) {
	i, _ := slices.BinarySearchFunc(m.regions, addr, func(r region, a uint64) int {
		if r.end <= a {
			return -1
		}
		return 1
	})
	at := addr
	for ; i < len(m.regions) && at < end; i++ {
		r := m.regions[i]
		if r.start > at {
			return false, nil
		}
		if !r.anon {
			// A file mapping's pages that are in the process's page
			// tables are read without the file system: pages of a
			// private mapping the process wrote to (musl's malloc hands
			// out the tail of a data segment's last page; static records
			// live in .data), or file pages it touched.
			if err := m.resident(at, min(end, r.end)); err != nil {
				return false, err
			}
		}
		at = r.end
	}
	return at >= end, nil
}

// maxResidencyPages bounds the pages of a file mapping checked per read
// (64 KiB, the largest payload, spans at most 17 pages of 4 KiB).
const maxResidencyPages = 64

// Page flags of /proc/PID/pagemap entries.
const (
	pagePresent  = 1 << 63
	pageSwapped  = 1 << 62
	pageFileOrSh = 1 << 61 // a page-cache (file) page, or shared anonymous memory
)

// resident checks in /proc/PID/pagemap that every page of [start, end) is
// in the process's page tables, or is its own page swapped out, so that
// reading it cannot go to a file.
func (m *Memory) resident(start, end uint64) error {
	m.PagemapReads++
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
		e := binary.NativeEndian.Uint64(b[i*8:])
		if e&pagePresent == 0 && (e&pageSwapped == 0 || e&pageFileOrSh != 0) {
			return fmt.Errorf("page %#x not resident: %w", (first+i)*page, ErrFileBacked)
		}
	}
	return nil
}

// Anonymous reports whether a mapping is memory of the process rather than
// of a regular file, by its name alone (exactly as the kernel writes it):
// plain anonymous memory, a pseudo-mapping such as [heap], [stack] or
// [anon:NAME], a memfd (shmem), or System V or /dev/zero shared memory.
// Load also checks the device of shared memory (anonymousMapping).
func Anonymous(m procmaps.Mapping) bool { return anonymousName([]byte(m.Name)) }

// The kernel's names of memory that is not a file's (fs/proc/task_mmu.c,
// mm/shmem.c, ipc/shm.c, mm/memfd.c).
var (
	memfdPrefix = []byte("/memfd:")
	sysvPrefix  = []byte("/SYSV")
	devZero     = []byte("/dev/zero")
	deleted     = []byte(" (deleted)")
)

// anonymousName matches exactly: "" or a "[...]" pseudo-name; "/memfd:NAME"
// (NAME without "/", optionally " (deleted)"); "/SYSV" and 8 hex digits
// (the key), optionally " (deleted)"; "/dev/zero" or "/dev/zero
// (deleted)". A path that only starts like one (/dev/zerofs/x, /memfd:x/y,
// possible in a container's mount namespace, on FUSE) is a file.
func anonymousName(name []byte) bool {
	switch {
	case len(name) == 0, name[0] == '[':
		return true
	case bytes.HasPrefix(name, memfdPrefix):
		return bytes.IndexByte(name[len(memfdPrefix):], '/') < 0
	case bytes.HasPrefix(name, sysvPrefix):
		key := bytes.TrimSuffix(name[len(sysvPrefix):], deleted)
		if len(key) != 8 {
			return false
		}
		for _, c := range key {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	case bytes.Equal(name, devZero):
		return true
	case len(name) == len(devZero)+len(deleted) && bytes.HasPrefix(name, devZero) && bytes.HasSuffix(name, deleted):
		return true
	}
	return false
}

// anonymousMapping is anonymousName with the mapping's device checked where
// the kernel's own tells: anonymous memory has none (0:0), and shared
// memory (memfd, System V, shared /dev/zero, shown "(deleted)") lives on
// the kernel's internal shmem mount, whatever the process's mount
// namespace. A private /dev/zero mapping shows the device node's file
// system (its pages are anonymous); its name is all there is to check.
// Where the shmem device is unknown (no memfd_create), names alone decide.
func anonymousMapping(name []byte, dev procmaps.Dev, inode uint64) bool {
	if !anonymousName(name) {
		return false
	}
	switch {
	case len(name) == 0:
		return dev == (procmaps.Dev{}) && inode == 0
	case name[0] == '[' || bytes.Equal(name, devZero):
		return true
	}
	shm, ok := shmemDevice()
	return !ok || dev == shm
}

// shmemDevice is the device of the kernel's internal shmem mount, learnt
// once from a memfd of this process.
var shmemDevice = sync.OnceValues(func() (procmaps.Dev, bool) {
	fd, err := unix.MemfdCreate("otelctx-shmem-dev", unix.MFD_CLOEXEC)
	if err != nil {
		return procmaps.Dev{}, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return procmaps.Dev{}, false
	}
	return procmaps.Dev{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev)}, true
})
