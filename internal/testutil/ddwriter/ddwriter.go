// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddwriter drives testdata/ddwriter.c: a real process whose
// threads write a DD_OTEL_CTX ring (docs/dd-otel-ctx.md) exactly as the
// Datadog Java profiler does, including a self-checking write storm (StormOK).
package ddwriter

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
)

type Libc = testpub.Libc

const (
	Glibc = testpub.Glibc
	Musl  = testpub.Musl
)

var Libcs = testpub.Libcs

// Storm self-check constants (must match ddwriter.c).
const (
	StormK = 0x9E3779B97F4A7C15
	StormM = 0xFF51AFD7ED558CCD
)

// StormOK: a mix of two writes, or another thread's value, fails.
func StormOK(tid int, s ddotel.Slot) bool {
	v := s.TraceIDHigh
	return v != 0 && s.TraceIDLow == v*StormK && s.SpanID == v^uint64(tid)*StormM
}

func Source() string { return testenv.Testdata("publishers", "ddwriter.c") }

var builds testpub.Builds

// Build compiles once per test binary; a missing compiler skips (fails under CI=true).
func Build(tb testing.TB, libc Libc) string {
	tb.Helper()
	return builds.Get(tb, libc, func(cc string) string {
		return testpub.CompileC(tb, cc, Name(libc), Source(), Flags(tb)...)
	})
}

// Name and Flags: how Build compiles the writer (test/vm builds it for
// its guests the same way).
func Name(libc Libc) string { return "ddwriter-" + string(libc) }

func Flags(tb testing.TB) []string {
	tb.Helper()
	// procctx.h goes into the flags so CompileC's content cache sees it change.
	h, err := os.ReadFile(filepath.Join(filepath.Dir(Source()), "procctx.h"))
	if err != nil {
		tb.Fatal(err)
	}
	sum := sha256.Sum256(h)
	return []string{"-O2", "-Wall", "-pthread", "-DPROCCTX_H_SHA256=" + hex.EncodeToString(sum[:8])}
}

type Options struct {
	Capacity int // slots (default 65536)
	Threads  int // workers started before "ready" returns (default 4; -1 for none)
	// Context also publishes an OTEP 4719 process context with this service.name.
	Context string
	Env     []string
	// PIDNamespace runs the writer as PID 1 of a new PID namespace, as a
	// containerised JVM: slots use Thread.NSTID. Guard with testenv.RequirePIDNamespace.
	PIDNamespace bool
}

// Thread: TID is ours, NSTID the writer's namespace's (equal unless PIDNamespace).
type Thread struct {
	Index, TID, NSTID int
}

type Writer struct {
	tb   testing.TB
	proc *testpub.Proc

	PID int
	// Named: whether prctl naming worked.
	Buf      uint64
	Capacity uint32
	Named    bool
	Threads  []Thread
	// NSPID is 1 with Options.PIDNamespace.
	NSPID int

	inNS bool
}

// ReplyTimeout: thread start-up under -race on 2 busy cores can take a while.
var ReplyTimeout = 20 * time.Second

// Start builds (once) and runs a writer, killed when the test ends.
func Start(tb testing.TB, libc Libc, o Options) *Writer {
	tb.Helper()
	return StartBinary(tb, Build(tb, libc), o)
}

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

// LiveTIDs lists the writer's threads (the main thread included) as
// /proc/PID/task does now.
func (w *Writer) LiveTIDs() []int {
	w.tb.Helper()
	tids, err := ptrace.ListThreads("/proc", w.PID)
	if err != nil {
		w.tb.Fatalf("ddwriter %d: %v", w.PID, err)
	}
	return tids
}

// HostTID maps a writer-namespace TID to ours; not found fails the test.
func (w *Writer) HostTID(nsTID int) int {
	w.tb.Helper()
	if !w.inNS {
		return nsTID
	}
	tids := w.LiveTIDs()
	for _, host := range tids {
		if ns, ok := w.nsTID(host); ok && ns == nsTID {
			return host
		}
	}
	w.tb.Fatalf("ddwriter %d: no thread with TID %d in its namespace among %v", w.PID, nsTID, tids)
	return 0
}

// SlotsMoved: every thread's slot differs between its two TIDs, so a read by
// the wrong TID never finds the thread's own.
func (w *Writer) SlotsMoved() bool {
	w.tb.Helper()
	tids := w.LiveTIDs()
	for _, t := range tids {
		ns, ok := w.nsTID(t)
		if !ok || uint64(t)%uint64(w.Capacity) == uint64(ns)%uint64(w.Capacity) {
			return false
		}
	}
	return len(tids) > 0
}

// nsTID reads status directly: the tests check pidns.TIDs against it.
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

// StartInPIDNamespace tries capacities from o.Capacity (8 if 0) up until
// SlotsMoved holds.
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

// Do: a reply not ending in "ok" fails the test.
func (w *Writer) Do(format string, args ...any) map[string]string {
	w.tb.Helper()
	cmd, l := w.proc.Ask(format, args...)
	if !strings.HasSuffix(l, "ok") || strings.HasPrefix(l, "err") {
		w.tb.Fatalf("ddwriter %d: %s: %s", w.PID, cmd, l)
	}
	return fields(strings.TrimSuffix(l, "ok"))
}

func (w *Writer) Set(i int, hi, lo, span uint64) {
	w.tb.Helper()
	w.Do("set %d %x %x %x", i, hi, lo, span)
}

func (w *Writer) Clear(i int) {
	w.tb.Helper()
	w.Do("clear %d", i)
}

func (w *Writer) Busy(i int) {
	w.tb.Helper()
	w.Do("busy %d", i)
}

func (w *Writer) Idle(i int) {
	w.tb.Helper()
	w.Do("idle %d", i)
}

// Storm: every worker rewrites its slot with StormOK values; returns writes so far.
func (w *Writer) Storm() uint64 {
	w.tb.Helper()
	return w.writes(w.Do("storm"))
}

// Calm: every slot keeps a consistent last value; returns writes so far.
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

func (w *Writer) Spawn() Thread {
	w.tb.Helper()
	t := w.thread(w.Do("spawn"))
	w.Threads = append(w.Threads, t)
	return t
}

// Collide starts a worker sharing worker i's slot; it returns the thread starts it took.
func (w *Writer) Collide(i int) (Thread, int) {
	w.tb.Helper()
	kv := w.Do("collide %d", i)
	t := w.thread(kv)
	tries, _ := strconv.Atoi(kv["tries"])
	w.Threads = append(w.Threads, t)
	return t, tries
}

func (w *Writer) Context(service string) {
	w.tb.Helper()
	w.Do("context %s", service)
}

// Exit: the slot keeps its last value.
func (w *Writer) Exit(i int) {
	w.tb.Helper()
	w.Do("exit %d", i)
}

// Header overwrites the header's first 16 bytes, for hostile-buffer tests.
func (w *Writer) Header(magic, version, capacity, slotSize uint32) {
	w.tb.Helper()
	w.Do("header %x %x %x %x", magic, version, capacity, slotSize)
}

func (w *Writer) Quit() {
	w.tb.Helper()
	w.proc.Stop("quit", ReplyTimeout)
}

func (w *Writer) Kill() { w.proc.Kill() }
