package scan

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func dirent(name string) []byte {
	reclen := (direntName + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint16(b[direntReclen:], uint16(reclen))
	copy(b[direntName:], name)
	return b
}

func TestAppendPIDs(t *testing.T) {
	var buf []byte
	for _, n := range []string{".", "..", "1", "self", "thread-self", "42", "0", "007", "12a", "", "4194304", "99999999999", "1000000"} {
		buf = append(buf, dirent(n)...)
	}
	got := appendPIDs(nil, buf)
	if want := []int{1, 42, 4194304, 1000000}; !slices.Equal(got, want) {
		t.Fatalf("appendPIDs = %v, want %v", got, want)
	}
	// A truncated or corrupt record ends the parse, without panicking.
	if got := appendPIDs(nil, buf[:len(buf)-3]); len(got) != 3 {
		t.Fatalf("truncated buffer: %v", got)
	}
	bad := dirent("5")
	binary.NativeEndian.PutUint16(bad[direntReclen:], 3)
	if got := appendPIDs(nil, append(bad, dirent("6")...)); len(got) != 0 {
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
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %d pids, want %d", round, len(got), len(want))
		}
	}
	if _, err := (&pidLister{root: filepath.Join(root, "missing")}).list(); err == nil {
		t.Fatal("listing a missing root succeeded")
	}
}

func TestPIDListerProc(t *testing.T) {
	l := pidLister{root: "/proc"}
	got, err := l.list()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, os.Getpid()) || !slices.Contains(got, 1) {
		t.Fatalf("/proc listing %v lacks pid 1 or this process (%d)", got, os.Getpid())
	}
	for _, pid := range got {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil && !os.IsNotExist(err) {
			t.Fatalf("/proc/%d: %v", pid, err)
		}
	}
}
