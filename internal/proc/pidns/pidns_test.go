// SPDX-License-Identifier: Apache-2.0

//go:build linux

package pidns

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestParseNSpid(t *testing.T) {
	for _, c := range []struct {
		status string
		want   int
	}{
		{"Name:\tx\nTgid:\t9\nNSpid:\t1234\nNSpgid:\t1\n", 1234},
		{"Name:\tx\nNSpid:\t18796\t57\t2\nNSpgid:\t1\n", 2},
		{"Name:\tx\nNSpid:\t18796\t2", 2},
	} {
		if got, err := ParseNSpid([]byte(c.status)); err != nil || got != c.want {
			t.Errorf("%q: %d, %v; want %d", c.status, got, err, c.want)
		}
	}
	for _, bad := range []string{"Name:\tx\nPid:\t3\n", "Name:\tx\nNSpid:\t\n", "Name:\tx\nNSpid:\t12 x\n", "Name:\tx\nNSpid:\t0\n"} {
		if _, err := ParseNSpid([]byte(bad)); !errors.Is(err, ErrNoNSTID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestOwnProcess: this process is in its own namespace, and its TIDs there
// are the ones it lists.
func TestOwnProcess(t *testing.T) {
	pid := os.Getpid()
	ours, err := Of("", pid)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Fatal(err)
	}
	if ours.Ino != st.Ino || ours.Ino == 0 {
		t.Fatalf("Of = %+v, /proc/self/ns/pid inode %d", ours, st.Ino)
	}
	tid := syscall.Gettid()
	if got, err := TaskNSTID("/proc", pid, tid); err != nil || got != tid {
		t.Fatalf("TaskNSTID(%d) = %d, %v", tid, got, err)
	}
	n := NewTIDs("", pid)
	if !n.SameNamespace() {
		t.Fatal("own process in another namespace")
	}
	if got := n.Map([]int{tid}); got[tid] != tid || n.Len() != 0 {
		t.Fatalf("Map = %v, %d cached", got, n.Len())
	}
}

// fakeNamespace is a /proc tree where process 100 is in another PID
// namespace than self, its threads 100..102 being 1..3 there, thread 103
// without an NSpid line.
func fakeNamespace(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("self/ns/pid", "")
	write("100/ns/pid", "")
	for i := range 3 {
		tid := strconv.Itoa(100 + i)
		write("100/task/"+tid+"/status", "Name:\tjava\nPid:\t"+tid+"\nNSpid:\t"+tid+"\t"+strconv.Itoa(i+1)+"\n")
	}
	write("100/task/103/status", "Name:\tjava\nPid:\t103\n")
	return root
}

func TestTIDsInAnotherNamespace(t *testing.T) {
	root := fakeNamespace(t)
	n := NewTIDs(root, 100)
	if n.SameNamespace() {
		t.Fatal("different ns/pid inodes taken for one namespace")
	}
	got := n.Map([]int{100, 101, 102, 103, 104})
	if len(got) != 3 || got[100] != 1 || got[101] != 2 || got[102] != 3 {
		t.Fatalf("Map = %v", got)
	}
	if n.Len() != 3 {
		t.Fatalf("%d cached", n.Len())
	}
	// Errors name the file they come from.
	_, err := n.TID(103)
	if !errors.Is(err, ErrNoNSTID) || !strings.Contains(err.Error(), "100/task/103/status") {
		t.Fatalf("TID(103): %v", err)
	}
	if _, err := n.TID(104); !errors.Is(err, ErrNoNSTID) || !strings.Contains(err.Error(), "100/task/104/status") {
		t.Fatalf("TID(104): %v", err)
	}
	// The cache is bounded by the live threads once it outgrows them.
	for tid := 200; tid < 300; tid++ {
		n.tids[tid] = tid
	}
	n.Prune(map[int]bool{100: true})
	if n.Len() != 1 {
		t.Fatalf("after Prune: %d cached", n.Len())
	}
	if _, err := Of(root, 999); err == nil || !strings.Contains(err.Error(), "999/ns/pid") {
		t.Fatalf("Of(999): %v", err)
	}
}

// TestUnreadableLinksReadStatus: when the ns/pid links cannot be compared
// (hidden, or the process is going), the TIDs come from each thread's
// status, never taken as they are.
func TestUnreadableLinksReadStatus(t *testing.T) {
	root := fakeNamespace(t)
	if err := os.Remove(filepath.Join(root, "100/ns/pid")); err != nil {
		t.Fatal(err)
	}
	n := NewTIDs(root, 100)
	if n.SameNamespace() {
		t.Fatal("a process whose ns/pid cannot be read taken for one in our namespace")
	}
	if got := n.Map([]int{100, 101, 103}); len(got) != 2 || got[100] != 1 || got[101] != 2 {
		t.Fatalf("Map = %v, want the status files' NSpid values", got)
	}
}
