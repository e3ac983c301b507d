// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package pidns answers a process's PID-namespace questions from /proc:
// which PID namespace it is in (what bpf_get_ns_current_pid_tgid takes),
// and its threads' TIDs in that namespace (the last NSpid value of each
// thread's status), which are what a thread's own gettid() returns.
package pidns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ErrNoNSTID: a thread's TID in its namespace is not known (the thread
// exited, or its status has no usable NSpid line).
var ErrNoNSTID = errors.New("namespace tid unknown")

// ID identifies a PID namespace: the device and inode of /proc/PID/ns/pid.
type ID struct {
	Dev, Ino uint64
}

// Of is the PID namespace of pid; procRoot "" is "/proc".
func Of(procRoot string, pid int) (ID, error) {
	return idOf(root(procRoot) + "/" + strconv.Itoa(pid) + "/ns/pid")
}

func root(procRoot string) string {
	if procRoot == "" {
		return "/proc"
	}
	return procRoot
}

func idOf(path string) (ID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ID{}, fmt.Errorf("%s: %w", path, err)
	}
	return ID{Dev: uint64(st.Dev), Ino: st.Ino}, nil //nolint:unconvert // Dev is uint32 on some architectures
}

// TaskNSTID reads tid's TID in its innermost PID namespace from
// procRoot/pid/task/tid/status; errors name the file and wrap ErrNoNSTID.
func TaskNSTID(procRoot string, pid, tid int) (int, error) {
	path := root(procRoot) + "/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoNSTID, err) // the PathError names the file
	}
	v, err := ParseNSpid(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// ParseNSpid is the last value of a status file's NSpid line: the TID in
// the innermost PID namespace. Anything else is ErrNoNSTID.
func ParseNSpid(status []byte) (int, error) {
	i := bytes.Index(status, []byte("\nNSpid:"))
	if i < 0 {
		return 0, fmt.Errorf("%w: no NSpid line", ErrNoNSTID)
	}
	line := status[i+len("\nNSpid:"):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: empty NSpid line", ErrNoNSTID)
	}
	v, err := strconv.Atoi(string(f[len(f)-1]))
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%w: NSpid %q", ErrNoNSTID, line)
	}
	return v, nil
}

// TIDs maps one process's TIDs as listed here to those of its own PID
// namespace. One per process identity; not safe for concurrent use.
type TIDs struct {
	procRoot string
	pid      int
	checked  bool
	same     bool
	tids     map[int]int
}

// NewTIDs maps the threads of pid; procRoot "" is "/proc".
func NewTIDs(procRoot string, pid int) *TIDs {
	return &TIDs{procRoot: root(procRoot), pid: pid}
}

// SameNamespace is decided once. Without both links to compare it is
// false: each thread's status then names its TID, which is right in either
// case (taking host TIDs for a container's would link its slots wrongly).
func (n *TIDs) SameNamespace() bool {
	if !n.checked {
		n.checked = true
		theirs, err1 := Of(n.procRoot, n.pid)
		ours, err2 := idOf(n.procRoot + "/self/ns/pid")
		n.same = err1 == nil && err2 == nil && theirs == ours
		if !n.same {
			n.tids = map[int]int{}
		}
	}
	return n.same
}

// TID is tid's TID in the process's namespace.
func (n *TIDs) TID(tid int) (int, error) {
	if n.SameNamespace() {
		return tid, nil
	}
	if ns, ok := n.tids[tid]; ok {
		return ns, nil
	}
	ns, err := TaskNSTID(n.procRoot, n.pid, tid)
	if err != nil {
		return 0, err
	}
	n.tids[tid] = ns
	return ns, nil
}

// Map leaves out threads that exited meanwhile.
func (n *TIDs) Map(tids []int) map[int]int {
	out := make(map[int]int, len(tids))
	for _, t := range tids {
		if ns, err := n.TID(t); err == nil {
			out[t] = ns
		}
	}
	return out
}

// Prune bounds the cache by the process's live threads.
func (n *TIDs) Prune(live map[int]bool) {
	if len(n.tids) <= 2*len(live)+64 {
		return
	}
	for tid := range n.tids {
		if !live[tid] {
			delete(n.tids, tid)
		}
	}
}

// Len is the number of TIDs cached.
func (n *TIDs) Len() int { return len(n.tids) }
