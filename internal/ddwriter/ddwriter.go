// Package ddwriter compiles and drives testdata/ddotel/ddwriter.c: a real
// process whose threads publish their trace context in a Datadog
// "otel" ring buffer (DD_OTEL_CTX, docs/dd-otel-ctx.md), laid out and written
// exactly as the Datadog Java profiler does.
//
//	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 3})
//	w.Set(0, 0, 0xabc, 0x123) // worker 0's slot (w.Threads[0].TID % 16)
//	w.Storm()                 // every worker rewrites its slot in a tight loop
//	... read while storming; StormOK checks every accepted slot
//	w.Calm()
package ddwriter

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/ptrace"
	"github.com/otelctx/otelctx/internal/testpub"
)

// Libc selects the C library (the compiler driver).
type Libc = testpub.Libc

// The C libraries the writer is built for.
const (
	Glibc = testpub.Glibc
	Musl  = testpub.Musl
)

// Libcs lists both, for table-driven tests.
var Libcs = testpub.Libcs

// The storm's self-check constants (must match ddwriter.c).
const (
	StormK = 0x9E3779B97F4A7C15
	StormM = 0xFF51AFD7ED558CCD
)

// StormOK reports whether s is a value thread tid wrote in a storm, in one
// piece: hi = v > 0, lo = v*StormK, span = v ^ tid*StormM. A mix of two
// writes, or a value of another thread, fails.
func StormOK(tid int, s ddotel.Slot) bool {
	v := s.TraceIDHigh
	return v != 0 && s.TraceIDLow == v*StormK && s.SpanID == v^uint64(tid)*StormM
}

// Source is the writer's C source.
func Source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "ddotel", "ddwriter.c")
}

var builds testpub.Builds

// Build compiles the writer with libc once per test binary (content-cached
// across test binaries by testpub.CompileC). A missing compiler skips
// (fails under CI=true).
func Build(tb testing.TB, libc Libc) string {
	tb.Helper()
	return builds.Get(tb, libc, func(cc string) string {
		// ddwriter.c includes testdata/threadpub/procctx.h: its hash goes into
		// the flags so that CompileC's content cache sees it change.
		h, err := os.ReadFile(filepath.Join(filepath.Dir(Source()), "..", "threadpub", "procctx.h"))
		if err != nil {
			tb.Fatal(err)
		}
		sum := sha256.Sum256(h)
		return testpub.CompileC(tb, cc, "ddwriter-"+string(libc), Source(), "-O2", "-Wall", "-pthread",
			"-DPROCCTX_H_SHA256="+hex.EncodeToString(sum[:8]))
	})
}

// Options are the writer's command-line options (zero: its defaults).
type Options struct {
	Capacity int // slots (default 65536)
	Threads  int // workers started before "ready" returns (default 4; -1 for none)
	// Context, when set, also publishes an OTEP 4719 process context with
	// this service.name (no thread-local schema).
	Context string
	// Env is added to the writer's environment (e.g. LD_PRELOAD).
	Env []string
	// PIDNamespace starts the writer as PID 1 of a new PID namespace (as
	// `unshare -p -f` does; a containerised JVM): its threads index their
	// slots with TIDs of that namespace (Thread.NSTID), not the TIDs seen
	// from here (Thread.TID). Guard with testenv.RequirePIDNamespace.
	PIDNamespace bool
}

// Thread is one worker. TID is its TID in our PID namespace, NSTID the one
// it has in the writer's (gettid() there; the slot is NSTID % capacity).
// They are equal unless Options.PIDNamespace.
type Thread struct {
	Index, TID, NSTID int
}

// Writer is one running ddwriter process.
type Writer struct {
	tb   testing.TB
	proc *testpub.Proc

	PID int
	// Buf is the buffer's address (a mapping of 32 + 32*Capacity bytes),
	// Named whether prctl naming worked (not on this project's machines).
	Buf      uint64
	Capacity uint32
	Named    bool
	// Threads are the workers, by index.
	Threads []Thread
	// NSPID is the writer's PID in its own PID namespace (PID unless
	// Options.PIDNamespace, then 1).
	NSPID int

	inNS bool
}

// ReplyTimeout bounds every wait for an answer (thread start-up under
// -race on 2 busy cores can take a while); a writer reads it when it starts.
var ReplyTimeout = 20 * time.Second

// Start builds (once) and runs a writer; it is killed when the test ends.
func Start(tb testing.TB, libc Libc, o Options) *Writer {
	tb.Helper()
	return StartBinary(tb, Build(tb, libc), o)
}

// StartBinary runs the writer at path.
func StartBinary(tb testing.TB, path string, o Options) *Writer {
	tb.Helper()
	var args []string
	if o.Capacity != 0 {
		args = append(args, "--capacity", strconv.Itoa(o.Capacity))
	}
	switch {
	case o.Threads < 0:
		args = append(args, "--threads", "0")
	case o.Threads > 0:
		args = append(args, "--threads", strconv.Itoa(o.Threads))
	}
	if o.Context != "" {
		args = append(args, "--context", o.Context)
	}
	var attr *syscall.SysProcAttr
	if o.PIDNamespace {
		attr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	proc := testpub.RunProcAttr(tb, "ddwriter", ReplyTimeout, o.Env, attr, path, args...)
	w := &Writer{tb: tb, proc: proc, PID: proc.PID, NSPID: proc.PID, inNS: o.PIDNamespace}
	if o.PIDNamespace {
		w.NSPID = 1
	}

	kv := fields(w.readLine())
	if _, ok := kv["ready"]; !ok || kv["pid"] != strconv.Itoa(w.NSPID) {
		tb.Fatalf("ddwriter: unexpected greeting %v", kv)
	}
	var err error
	w.Buf, err = strconv.ParseUint(kv["buf"], 0, 64)
	if err != nil {
		tb.Fatalf("ddwriter: greeting buf: %v", err)
	}
	c, err := strconv.ParseUint(kv["capacity"], 10, 32)
	if err != nil {
		tb.Fatalf("ddwriter: greeting capacity: %v", err)
	}
	w.Capacity, w.Named = uint32(c), kv["named"] == "1"
	n := o.Threads
	if n == 0 {
		n = 4
	}
	for i := 0; i < n; i++ {
		w.Threads = append(w.Threads, w.thread(fields(w.readLine())))
	}
	return w
}

// fields splits "word k=v k=v ..." into a map (bare words map to "").
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (w *Writer) thread(kv map[string]string) Thread {
	w.tb.Helper()
	tid, err1 := strconv.Atoi(kv["tid"])
	idx, err2 := strconv.Atoi(kv["index"])
	if _, ok := kv["thread"]; !ok || err1 != nil || err2 != nil {
		w.tb.Fatalf("ddwriter %d: bad thread line %v", w.PID, kv)
	}
	if !w.inNS {
		return Thread{Index: idx, TID: tid, NSTID: tid}
	}
	return Thread{Index: idx, TID: w.HostTID(tid), NSTID: tid}
}

// HostTID returns the TID in our PID namespace of the writer's thread
// whose TID in the writer's namespace is nsTID (the last NSpid value of
// /proc/PID/task/TID/status); a thread not found fails the test.
func (w *Writer) HostTID(nsTID int) int {
	w.tb.Helper()
	if !w.inNS {
		return nsTID
	}
	tids, err := ptrace.ListThreads("/proc", w.PID)
	if err != nil {
		w.tb.Fatalf("ddwriter %d: %v", w.PID, err)
	}
	for _, host := range tids {
		if ns, ok := w.nsTID(host); ok && ns == nsTID {
			return host
		}
	}
	w.tb.Fatalf("ddwriter %d: no thread with TID %d in its namespace among %v", w.PID, nsTID, tids)
	return 0
}

// SlotsMoved reports whether every thread of the writer (its main thread
// and the workers) has another slot at its TID here than at its TID in its
// namespace: reading a slot by the wrong TID then never finds the thread's
// own.
func (w *Writer) SlotsMoved() bool {
	w.tb.Helper()
	tids, err := ptrace.ListThreads("/proc", w.PID)
	if err != nil {
		w.tb.Fatalf("ddwriter %d: %v", w.PID, err)
	}
	for _, t := range tids {
		ns, ok := w.nsTID(t)
		if !ok || uint64(t)%uint64(w.Capacity) == uint64(ns)%uint64(w.Capacity) {
			return false
		}
	}
	return len(tids) > 0
}

// nsTID is the last NSpid value of thread tid's status (read here, not
// with ddotel.NSTIDs: the tests check that against this).
func (w *Writer) nsTID(tid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.PID) + "/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			v, err := strconv.Atoi(f[len(f)-1])
			return v, err == nil
		}
	}
	return 0, false
}

// StartInPIDNamespace starts a writer with o.Threads workers in a new PID
// namespace with the smallest capacity from o.Capacity (8 if 0) up at
// which every thread's slot differs between its TID here and its TID in
// the namespace (Writer.SlotsMoved; a writer that misses is killed and
// the next capacity tried).
func StartInPIDNamespace(tb testing.TB, libc Libc, o Options) *Writer {
	tb.Helper()
	o.PIDNamespace = true
	if o.Capacity == 0 {
		o.Capacity = 8
	}
	first := o.Capacity
	for c := first; c < first+64; c++ {
		o.Capacity = c
		w := Start(tb, libc, o)
		if w.SlotsMoved() {
			return w
		}
		w.Kill()
	}
	tb.Fatalf("ddwriter: no capacity moves every slot")
	return nil
}

func (w *Writer) readLine() string {
	w.tb.Helper()
	return w.proc.ReadLine()
}

// Do sends one command and returns its reply's k=v fields; a reply not
// ending in "ok" fails the test.
func (w *Writer) Do(format string, args ...any) map[string]string {
	w.tb.Helper()
	cmd, l := w.proc.Ask(format, args...)
	if !strings.HasSuffix(l, "ok") || strings.HasPrefix(l, "err") {
		w.tb.Fatalf("ddwriter %d: %s: %s", w.PID, cmd, l)
	}
	return fields(strings.TrimSuffix(l, "ok"))
}

// Set makes worker i write (hi, lo, span) into its slot and keep it.
func (w *Writer) Set(i int, hi, lo, span uint64) {
	w.tb.Helper()
	w.Do("set %d %x %x %x", i, hi, lo, span)
}

// Clear makes worker i write zeros (no context).
func (w *Writer) Clear(i int) {
	w.tb.Helper()
	w.Do("clear %d", i)
}

// Busy makes worker i spin on a CPU, keeping its context.
func (w *Writer) Busy(i int) {
	w.tb.Helper()
	w.Do("busy %d", i)
}

// Idle makes worker i block, keeping its context.
func (w *Writer) Idle(i int) {
	w.tb.Helper()
	w.Do("idle %d", i)
}

// Storm makes every worker rewrite its slot in a tight loop with
// self-checking values (StormOK); it returns the storm writes so far.
func (w *Writer) Storm() uint64 {
	w.tb.Helper()
	return w.writes(w.Do("storm"))
}

// Calm stops the storm (every slot keeps a consistent last value, the
// workers block) and returns the storm writes so far.
func (w *Writer) Calm() uint64 {
	w.tb.Helper()
	return w.writes(w.Do("calm"))
}

func (w *Writer) writes(kv map[string]string) uint64 {
	w.tb.Helper()
	n, err := strconv.ParseUint(kv["writes"], 10, 64)
	if err != nil {
		w.tb.Fatalf("ddwriter %d: writes: %v", w.PID, kv)
	}
	return n
}

// Spawn starts one more worker.
func (w *Writer) Spawn() Thread {
	w.tb.Helper()
	t := w.thread(w.Do("spawn"))
	w.Threads = append(w.Threads, t)
	return t
}

// Collide starts a worker whose tid maps to worker i's slot (tid %
// capacity equal) and returns it with the thread starts it took.
func (w *Writer) Collide(i int) (Thread, int) {
	w.tb.Helper()
	kv := w.Do("collide %d", i)
	t := w.thread(kv)
	tries, _ := strconv.Atoi(kv["tries"])
	w.Threads = append(w.Threads, t)
	return t, tries
}

// Context publishes (or updates) a process context with service.name.
func (w *Writer) Context(service string) {
	w.tb.Helper()
	w.Do("context %s", service)
}

// Exit makes worker i exit; its slot keeps its last value.
func (w *Writer) Exit(i int) {
	w.tb.Helper()
	w.Do("exit %d", i)
}

// Header overwrites the header's magic, version, capacity and slot size
// (for hostile-buffer tests).
func (w *Writer) Header(magic, version, capacity, slotSize uint32) {
	w.tb.Helper()
	w.Do("header %x %x %x %x", magic, version, capacity, slotSize)
}

// Quit asks the writer to exit and waits until it has been reaped.
func (w *Writer) Quit() {
	w.tb.Helper()
	w.proc.Stop("quit", ReplyTimeout)
}

// Kill kills the writer and waits for it.
func (w *Writer) Kill() { w.proc.Kill() }
