// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

func dirent(name string) []byte {
	reclen := (direntName + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b, uint64(len(name))*1000+7) // d_ino
	binary.NativeEndian.PutUint16(b[direntReclen:], uint16(reclen))
	copy(b[direntName:], name)
	return b
}

func pidsOf(ents listing) []int {
	out := make([]int, len(ents))
	for i, e := range ents {
		out[i] = e.pid
	}
	return out
}

func TestAppendPIDs(t *testing.T) {
	var buf []byte
	for _, n := range []string{".", "..", "1", "self", "thread-self", "42", "0", "007", "12a", "", "4194304", "99999999999", "1000000"} {
		buf = append(buf, dirent(n)...)
	}
	got := appendEntries(nil, buf)
	if want := []int{1, 42, 4194304, 1000000}; !slices.Equal(pidsOf(got), want) {
		t.Fatalf("appendEntries = %v, want %v", got, want)
	}
	if got[2].ino != 7007 {
		t.Fatalf("inode of %d = %d, want 7007", got[2].pid, got[2].ino)
	}
	// A truncated or corrupt record ends the parse, without panicking.
	if got := appendEntries(nil, buf[:len(buf)-3]); len(got) != 3 {
		t.Fatalf("truncated buffer: %v", got)
	}
	bad := dirent("5")
	binary.NativeEndian.PutUint16(bad[direntReclen:], 3)
	if got := appendEntries(nil, append(bad, dirent("6")...)); len(got) != 0 {
		t.Fatalf("corrupt reclen: %v", got)
	}
}

func TestPIDListerFakeRoot(t *testing.T) {
	root := t.TempDir()
	var want []int
	for i := 1; i <= 3000; i++ { // several getdents64 calls
		want = append(want, i*7)
		if err := os.Mkdir(filepath.Join(root, strconv.Itoa(i*7)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"self", "sys", "1x"} {
		if err := os.Mkdir(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := pidLister{root: root}
	for round := 0; round < 2; round++ { // the buffers are reused
		got, err := l.list()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(pidsOf(got), want) { // sorted, whatever the directory order
			t.Fatalf("round %d: %d pids, want %d", round, len(got), len(want))
		}
		if e, ok := got.find(7 * 1234); !ok || e.pid != 7*1234 || got.has(7*1234+1) {
			t.Fatalf("round %d: find(%d) = %+v, %v", round, 7*1234, e, ok)
		}
	}
	if _, err := (&pidLister{root: filepath.Join(root, "missing")}).list(); err == nil {
		t.Fatal("listing a missing root succeeded")
	}
}

// TestPIDListerProc lists the real /proc: the inode a listing gives for a
// PID is its directory's (what tells a reused PID between listings).
func TestPIDListerProc(t *testing.T) {
	l := pidLister{root: "/proc"}
	got, err := l.list()
	if err != nil {
		t.Fatal(err)
	}
	self, ok := got.find(os.Getpid())
	if !ok || !got.has(1) {
		t.Fatalf("/proc listing %v lacks pid 1 or this process (%d)", pidsOf(got), os.Getpid())
	}
	fi, err := os.Stat("/proc/" + strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if ino := fi.Sys().(*syscall.Stat_t).Ino; self.ino != ino {
		t.Fatalf("listed inode of this process %d, its directory's %d", self.ino, ino)
	}
	for _, pid := range pidsOf(got) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil && !os.IsNotExist(err) {
			t.Fatalf("/proc/%d: %v", pid, err)
		}
	}
}
