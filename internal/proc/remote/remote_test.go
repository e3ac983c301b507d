// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

var word = uint64(0x1122334455667788)

// Reading this process's own memory exercises the real syscall without a
// second process (and without privileges).
func TestReadOwnMemory(t *testing.T) {
	m := Memory{PID: os.Getpid()}
	v, err := m.ReadUint64(uint64(uintptr(unsafe.Pointer(&word))))
	if err != nil || v != word {
		t.Fatalf("ReadUint64 = %#x, %v", v, err)
	}
	src := []byte("process_vm_readv reads exactly this")
	dst := make([]byte, len(src))
	if err := m.ReadAt(dst, uint64(uintptr(unsafe.Pointer(&src[0])))); err != nil || string(dst) != string(src) {
		t.Fatalf("ReadAt = %q, %v", dst, err)
	}
	if err := m.ReadAt(nil, 0); err != nil {
		t.Fatalf("empty read: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	self := Memory{PID: os.Getpid()}
	if _, err := self.ReadUint64(0x10); !errors.Is(err, ErrBadAddress) {
		t.Fatalf("unmapped address: %v", err)
	}

	// Two pages, the second unmapped: a read across the boundary is short.
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(mem); err != nil {
			t.Error(err)
		}
	}()
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(base)+uintptr(page), uintptr(page), 0); errno != 0 {
		t.Fatal(errno)
	}
	buf := make([]byte, 16)
	if err := self.ReadAt(buf, base+uint64(page)-8); !errors.Is(err, ErrShortRead) {
		t.Fatalf("read across into an unmapped page: %v", err)
	}
	if err := self.ReadAt(buf[:8], base+uint64(page)-8); err != nil {
		t.Fatalf("read up to the boundary: %v", err)
	}

	// A PID above pid_max cannot exist.
	gone := Memory{PID: 1 << 30}
	if _, err := gone.ReadUint64(base); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("no such process: %v", err)
	}
}
