package ddotel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ErrNoNSTID: a thread's TID in its process's PID namespace could not be
// found (the thread exited, or its status has no NSpid line).
var ErrNoNSTID = errors.New("dd_otel_ctx: namespace tid unknown")

// NSTIDs finds the TIDs one process's threads have in the process's own
// (innermost) PID namespace. The writer indexes its slot with
// syscall(__NR_gettid), the TID as the thread sees it: in a container with
// its own PID namespace that is not the TID this reader lists in
// /proc/PID/task. The namespace TID is the last value of the NSpid line of
// /proc/PID/task/TID/status; it is only looked up when /proc/PID/ns/pid is
// not the reader's /proc/self/ns/pid (otherwise the two TIDs are equal),
// and once per thread: a thread keeps its TIDs for life. Attribution stays
// keyed by the listed (reader's) TID; only slot indices use the namespace
// TID. An NSTIDs is for one process identity (a reused PID needs a new
// one) and is not safe for concurrent use.
type NSTIDs struct {
	procRoot string
	pid      int
	checked  bool
	same     bool
	tids     map[int]int
}

// NewNSTIDs returns the translator for pid's threads under procRoot ("" =
// "/proc"). Nothing is read before the first TID call.
func NewNSTIDs(procRoot string, pid int) *NSTIDs {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &NSTIDs{procRoot: procRoot, pid: pid}
}

// PIDNamespace returns the device and inode of /proc/PID/ns/pid under
// procRoot ("" = "/proc"), the identity of the process's PID namespace
// (what bpf_get_ns_current_pid_tgid takes).
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

// SameNamespace reports whether the process is in the reader's PID
// namespace (its TIDs are the listed ones). It is decided once. Without a
// namespace link to compare (a procfs without ns/pid, a process already
// gone) nothing says the TIDs differ: the listed ones are used.
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

// TID returns the TID thread tid (as listed in /proc/PID/task) has in the
// process's PID namespace, the one its slot is indexed by.
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

// Map returns the namespace TID of each of tids that has one (threads that
// exited meanwhile are left out).
func (n *NSTIDs) Map(tids []int) map[int]int {
	out := make(map[int]int, len(tids))
	for _, t := range tids {
		if ns, err := n.TID(t); err == nil {
			out[t] = ns
		}
	}
	return out
}

// Prune forgets the threads not in live once more than a few times their
// number are remembered, bounding the cache by the process's live threads.
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

// Len is the number of threads remembered.
func (n *NSTIDs) Len() int { return len(n.tids) }

// readNSpid returns the last value of the NSpid line of a status file: the
// TID in the innermost PID namespace.
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

// CollidingNS is Colliding for threads listed by the reader (tids, duplicates
// are one thread) whose slots are indexed by their namespace TIDs (ns, from
// NSTIDs.Map): it returns the listed TIDs that share their slot with
// another listed thread. Threads missing from ns (they exited) are left
// out. A zero capacity has no valid slot: every tid is reported.
func CollidingNS(tids []int, ns map[int]int, capacity uint32) map[int]bool {
	return colliding(tids, capacity, func(t int) (int, bool) { v, ok := ns[t]; return v, ok })
}
