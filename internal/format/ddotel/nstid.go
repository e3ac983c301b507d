// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

var ErrNoNSTID = errors.New("dd_otel_ctx: namespace tid unknown")

// NSTIDs maps listed TIDs to those of the process's own PID namespace,
// which index its slots (README.md, PID namespaces). One per process
// identity; not safe for concurrent use.
type NSTIDs struct {
	procRoot string
	pid      int
	checked  bool
	same     bool
	tids     map[int]int
}

func NewNSTIDs(procRoot string, pid int) *NSTIDs {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &NSTIDs{procRoot: procRoot, pid: pid}
}

// PIDNamespace identifies the process's PID namespace (what
// bpf_get_ns_current_pid_tgid takes).
func PIDNamespace(procRoot string, pid int) (dev, ino uint64, err error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return nsOf(procRoot + "/" + strconv.Itoa(pid) + "/ns/pid")
}

func nsOf(path string) (dev, ino uint64, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return uint64(st.Dev), uint64(st.Ino), nil //nolint:unconvert // Dev is uint32 on some architectures
}

// SameNamespace is decided once; without links to compare, nothing says the
// TIDs differ.
func (n *NSTIDs) SameNamespace() bool {
	if !n.checked {
		n.checked = true
		d1, i1, err1 := nsOf(n.procRoot + "/" + strconv.Itoa(n.pid) + "/ns/pid")
		d2, i2, err2 := nsOf(n.procRoot + "/self/ns/pid")
		n.same = err1 != nil || err2 != nil || (d1 == d2 && i1 == i2)
		if !n.same {
			n.tids = map[int]int{}
		}
	}
	return n.same
}

func (n *NSTIDs) TID(tid int) (int, error) {
	if n.SameNamespace() {
		return tid, nil
	}
	if ns, ok := n.tids[tid]; ok {
		return ns, nil
	}
	ns, err := readNSpid(n.procRoot + "/" + strconv.Itoa(n.pid) + "/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	n.tids[tid] = ns
	return ns, nil
}

// Map leaves out threads that exited meanwhile.
func (n *NSTIDs) Map(tids []int) map[int]int {
	out := make(map[int]int, len(tids))
	for _, t := range tids {
		if ns, err := n.TID(t); err == nil {
			out[t] = ns
		}
	}
	return out
}

// Prune bounds the cache by the process's live threads.
func (n *NSTIDs) Prune(live map[int]bool) {
	if len(n.tids) <= 2*len(live)+64 {
		return
	}
	for tid := range n.tids {
		if !live[tid] {
			delete(n.tids, tid)
		}
	}
}

func (n *NSTIDs) Len() int { return len(n.tids) }

// readNSpid: the NSpid line's last value is the innermost namespace's TID.
func readNSpid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoNSTID, err)
	}
	return parseNSpid(b)
}

func parseNSpid(status []byte) (int, error) {
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

// CollidingNS is Colliding over listed tids whose slots use their ns TIDs;
// tids missing from ns (exited) are left out.
func CollidingNS(tids []int, ns map[int]int, capacity uint32) map[int]bool {
	return colliding(tids, capacity, func(t int) (int, bool) { v, ok := ns[t]; return v, ok })
}
