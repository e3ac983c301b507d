// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package safemem reads another process's memory only where the read cannot
// block on a file system: the publisher chooses the addresses, and a
// non-resident page of a FUSE-backed mapping waits on its server for as long
// as it likes. Reads outside anonymous memory need every page resident. A
// page reclaimed or remapped between check and read is not caught here: the
// read then waits in remote's helper process, never in this program, and
// is abandoned at the read timeout.
package safemem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// ErrFileBacked: part of the range is a file's non-resident pages.
var ErrFileBacked = errors.New("not in anonymous memory (a read of a file-backed mapping may block on its file system)")

// maxRegions: a JVM has tens of thousands of mappings, the kernel's
// default limit (vm.max_map_count) 65530; past it, the rest is treated as
// unmapped. The list costs 24 bytes a region while a round reads, and
// keepRegions' worth between rounds.
const (
	maxRegions  = 1 << 16
	keepRegions = 256
)

// maxDevZeroChecks bounds the map_files lookups of one maps read: past it,
// a mapping named /dev/zero is a file's.
const maxDevZeroChecks = 16

type region struct {
	start, end uint64
	anon       bool
}

// Memory checks reads against the mappings as last loaded, so it is for one
// round of reads (a process can remap at any time). Not safe for concurrent use.
type Memory struct {
	mem      remote.Memory
	procRoot string
	regions  []region
	loaded   bool
	// fresh: the mappings were read in this round after a read missed
	// them, or first in it; another miss does not read them again.
	fresh bool
	pm    *pagemap.File
	// Misses counts reads outside the mappings as loaded (unmapped
	// addresses): at most one maps read per round for all of them.
	MapsReads, PagemapReads, Misses int
	sub                             readEachScratch
}

func New(procRoot string, pid int) *Memory {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Memory{mem: remote.Memory{PID: pid}, procRoot: procRoot}
}

// UsePagemap has the checks accept a range whose pages pm finds in the
// page tables before they read the maps file (pm belongs to the same
// process and outlives m's use).
func (m *Memory) UsePagemap(pm *pagemap.File) { m.pm = pm }

// Reset forgets the mappings last loaded, so that m can serve the next
// round of reads of the same process.
// A long mapping list is dropped: a publisher with thousands of mappings
// costs their list only while its round reads.
func (m *Memory) Reset() {
	m.loaded, m.fresh, m.sub.valid = false, false, false
	if cap(m.regions) > keepRegions {
		m.regions = nil
	}
}

// Load reads the mappings now, so reads while a thread is stopped need not.
func (m *Memory) Load() error { return m.LoadEach(nil) }

// LoadEach is Load that also hands each mapping to visit (when set), so a
// caller looking for a mapping reads the maps file once.
func (m *Memory) LoadEach(visit func(*procmaps.Line)) error {
	m.MapsReads++
	m.regions = m.regions[:0]
	m.loaded = true
	devZeroChecks := 0
	err := procmaps.EachLine(m.procRoot, m.mem.PID, func(l *procmaps.Line) {
		if visit != nil {
			visit(l)
		}
		anon := anonymousMapping(l.Name, l.Dev, l.Inode)
		if anon && bytes.Equal(l.Name, devZero) {
			// Trusted by its device, not its name: a file system the
			// publisher mounts can have a file at that path.
			devZeroChecks++
			anon = devZeroChecks <= maxDevZeroChecks && m.isDevZero(l.Start, l.End)
		}
		if k := len(m.regions) - 1; k >= 0 && anon && m.regions[k].anon && m.regions[k].end == l.Start {
			m.regions[k].end = l.End
			return
		}
		if len(m.regions) < maxRegions {
			m.regions = append(m.regions, region{start: l.Start, end: l.End, anon: anon})
		}
	})
	if err != nil {
		m.loaded = false
		return fmt.Errorf("pid %d: %w", m.mem.PID, err)
	}
	return nil
}

func (m *Memory) ReadAt(p []byte, addr uint64) error {
	if err := m.check(addr, uint64(len(p))); err != nil {
		return err
	}
	return m.mem.ReadAt(p, addr)
}

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
		if m.cachedPresent(addr, end) || m.heldPresent(addr, end) {
			return nil
		}
		if err := m.Load(); err != nil {
			return err
		}
		m.fresh = true
	}
	ok, err := m.covered(addr, end)
	if !ok && err == nil {
		m.Misses++
		if !m.fresh {
			// Perhaps mapped since the mappings were read; once a round, so reads
			// of many bad addresses (threads stopped meanwhile) cost one maps read.
			m.fresh = true
			if err := m.Load(); err != nil {
				return err
			}
			ok, err = m.covered(addr, end)
		}
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

// covered: an error says a file-mapped part is not resident.
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
			// Pages of a file mapping in the page tables are read without the file
			// system (musl's malloc hands out a data segment's written tail).
			if err := m.resident(at, min(end, r.end)); err != nil {
				return false, err
			}
		}
		at = r.end
	}
	return at >= end, nil
}

// maxResidencyPages: the largest payload (64 KiB) spans 17 pages.
const maxResidencyPages = 64

// resident accepts present pages and the process's own swapped pages.
func (m *Memory) resident(start, end uint64) error {
	m.PagemapReads++
	page := uint64(os.Getpagesize())
	first, last := start/page, (end-1)/page
	npages := last - first + 1
	if npages > maxResidencyPages {
		return fmt.Errorf("%d pages of a file mapping: %w", npages, ErrFileBacked)
	}
	pm, err := pagemap.Open(m.procRoot, m.mem.PID)
	if err != nil {
		return err
	}
	defer pm.Close()
	ents, err := pm.Read(first, int(npages))
	if err != nil {
		return err
	}
	for i, e := range ents {
		if !e.Resident() {
			return fmt.Errorf("page %#x not resident: %w", (first+uint64(i))*page, ErrFileBacked)
		}
	}
	return nil
}

// Anonymous reports memory that is not a regular file's, by name alone;
// Load also checks the device (anonymousMapping).
func Anonymous(m procmaps.Mapping) bool { return anonymousName([]byte(m.Name)) }

// The kernel's names of non-file memory (fs/proc/task_mmu.c, mm/shmem.c).
var (
	memfdPrefix = []byte("/memfd:")
	sysvPrefix  = []byte("/SYSV")
	devZero     = []byte("/dev/zero")
	deleted     = []byte(" (deleted)")
)

// anonymousName matches exactly: a path that only starts like one
// (/dev/zerofs/x, /memfd:x/y, possible on FUSE) is a file.
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

// anonymousMapping also checks the device: anonymous memory has 0:0, shared
// memory the kernel's shmem mount whatever the mount namespace (where the
// shmem device is unknown, no such name is trusted). A private mapping of
// /dev/zero shows the device of the file system holding the node: Load
// checks that the node is the character device 1:5 (isDevZero).
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
	return ok && dev == shm
}

// The memory device /dev/zero (Documentation/admin-guide/devices.txt).
const devZeroMajor, devZeroMinor = 1, 5

// isDevZero reports whether the mapping [start, end) is of the character
// device 1:5, by a stat of /proc/PID/map_files/START-END: the link leads
// to the mapped file itself, without a lookup of its path, and
// AT_STATX_DONT_SYNC has a network or FUSE file system answer from its
// cache rather than ask its server. Without the right to map_files
// (CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), no.
func (m *Memory) isDevZero(start, end uint64) bool {
	path := m.procRoot + "/" + strconv.Itoa(m.mem.PID) + "/map_files/" +
		strconv.FormatUint(start, 16) + "-" + strconv.FormatUint(end, 16)
	// The lookup of a map_files link takes the process's mmap lock: the
	// stat runs under a deadline (package lockread), on its own variable.
	st := new(unix.Statx_t)
	if err := lockread.Do(m.mem.PID, func() error {
		return unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC|unix.AT_NO_AUTOMOUNT, unix.STATX_TYPE, st)
	}, nil); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev_major == devZeroMajor && st.Rdev_minor == devZeroMinor
}

// shmemDevice is learnt once from a memfd of this process.
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
