// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/nodejs"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// The publisher is built once per test binary: removed when all ran.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testenv.LongLived, goleak.Cleanup(func(code int) {
		if pubDir != "" {
			os.RemoveAll(pubDir)
		}
		os.Exit(code)
	}))...)
}

// The C thread publisher (testdata/publishers), built here in its simplest
// cell (variable in a glibc executable); test/conformance runs the matrix.
var (
	buildOnce sync.Once
	pubPath   string
	buildErr  error
	pubDir    string // holds pubPath (TestMain removes it)
)

func buildPub(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t)
	cc := testenv.RequireTool(t, "gcc")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "otelctx-threadread-")
		if err != nil {
			buildErr = err
			return
		}
		pubDir = dir
		pubPath = filepath.Join(dir, "threadpub")
		src := threadpub.SourceDir()
		out, err := exec.Command(cc, "-O2", "-pthread", "-rdynamic", "-o", pubPath,
			filepath.Join(src, "threadpub.c"), filepath.Join(src, "otelctx_tls.c")).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return pubPath
}

type pub struct {
	t     testing.TB
	pid   int
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startPub(t testing.TB, args ...string) *pub {
	t.Helper()
	return startPubExe(t, buildPub(t), args...)
}

// startPubExe runs a publisher. Nothing waits for it until the test ends:
// the test process is its parent and also its tracer, and a wait would take
// the ptrace-stops of the child for itself.
func startPubExe(t testing.TB, exe string, args ...string) *pub {
	t.Helper()
	cmd := exec.Command(exe, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &pub{t: t, pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewScanner(stdout)}
	if f := p.line(); len(f) != 2 || f[0] != "ready" {
		t.Fatalf("greeting %q", f)
	}
	return p
}

// line reads one answer; the publisher answers every command at once and
// a dead publisher ends the scan.
func (p *pub) line() []string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("publisher %d: no answer", p.pid)
	}
	return strings.Fields(p.out.Text())
}

func (p *pub) do(format string, args ...any) []string {
	p.t.Helper()
	fmt.Fprintf(p.stdin, format+"\n", args...)
	f := p.line()
	if len(f) == 0 || f[0] != "ok" {
		p.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), f)
	}
	return f[1:]
}

func tid(f []string) int { n, _ := strconv.Atoi(f[0]); return n }

var keyMap = []string{"http.route", "http.request.method", "user.id"}

// otepVar is an OTEP 4947 variable at loc.
func otepVar(loc *tlsvar.Location) schema.Variable {
	return schema.Variable{Schema: &otep4947.Schema, Location: loc}
}

func resolve(t *testing.T, pid int) *tlsvar.Location {
	t.Helper()
	loc, err := tlsvar.Resolve("/proc", pid)
	if err != nil {
		t.Fatalf("tlsvar.Resolve: %v", err)
	}
	return loc
}

func byTID(threads []Thread) map[int]Thread {
	m := map[int]Thread{}
	for _, th := range threads {
		m[th.TID] = th
	}
	return m
}

func TestSnapshotReadsEveryThread(t *testing.T) {
	for _, writer := range []string{"swap", "flip"} {
		t.Run(writer, func(t *testing.T) {
			p := startPub(t, "--writer", writer)
			p.do("threads 4")
			a := tid(p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/api/v1/users 1=GET"))
			b := tid(p.do("set 1 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 0 2=alice 1=POST 1=PUT"))
			c := tid(p.do("clear 2"))
			idle := tid(p.do("info 3")) // never touched the variable
			main := tid(p.do("main"))
			threads, st, err := Snapshot(p.pid, otepVar(resolve(t, p.pid)), Options{KeyMap: keyMap})
			if err != nil {
				t.Fatal(err)
			}
			got := byTID(threads)
			if len(got) != 5 {
				t.Fatalf("%d threads, want 5: %+v", len(got), threads)
			}
			check := func(tid int, trace, span string, flags uint8, attrs map[string]string) {
				t.Helper()
				th := got[tid]
				if th.Record == nil {
					t.Fatalf("tid %d: no record (%s: %v)", tid, th.Reason, th.Err)
				}
				if th.Record.TraceID.String() != trace || th.Record.SpanID.String() != span || th.Record.TraceFlags != flags {
					t.Errorf("tid %d: %s %s %d", tid, th.Record.TraceID, th.Record.SpanID, th.Record.TraceFlags)
				}
				if fmt.Sprint(th.Attributes) != fmt.Sprint(attrs) {
					t.Errorf("tid %d: attributes %v, want %v", tid, th.Attributes, attrs)
				}
			}
			check(a, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", 1, map[string]string{"http.route": "/api/v1/users", "http.request.method": "GET"})
			// The last occurrence of a key index wins.
			check(b, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 0, map[string]string{"user.id": "alice", "http.request.method": "PUT"})
			wantCleared := ReasonNullPointer
			if writer == "flip" {
				wantCleared = ReasonNotValid
			}
			for tid, want := range map[int]string{c: wantCleared, idle: ReasonNullPointer, main: ReasonNullPointer} {
				if th := got[tid]; th.Record != nil || th.Reason != want {
					t.Errorf("tid %d: record %v reason %q, want %q", tid, th.Record, th.Reason, want)
				}
			}
			if st.Records != 2 || st.Ptrace.AlreadyTraced != 0 || st.KeyMapRefreshed {
				t.Errorf("stats %+v", st)
			}
			for _, th := range threads {
				if th.Stopped <= 0 {
					t.Errorf("tid %d: stop duration %v", th.TID, th.Stopped)
				}
			}
		})
	}
}

func TestSnapshotUnknownKeyRefreshedOnce(t *testing.T) {
	p := startPub(t)
	p.do("threads 2")
	a := tid(p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/a 7=x"))
	b := tid(p.do("set 1 0af7651916cd43dd8448eb211c80319c b7ad6b7169203332 1 2=bob 9=y"))
	loc := resolve(t, p.pid)
	refreshes := 0
	// A stale map (one entry): the refresh brings the full one; 7 and 9
	// stay unknown and are ignored.
	threads, st, err := Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap[:1], RefreshKeyMap: func() ([]string, error) {
		refreshes++
		return keyMap, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if refreshes != 1 || !st.KeyMapRefreshed || st.UnknownKeys != 2 || len(st.KeyMap) != 3 {
		t.Fatalf("refreshes %d, stats %+v", refreshes, st)
	}
	got := byTID(threads)
	if fmt.Sprint(got[a].Attributes) != "map[http.route:/a]" || fmt.Sprint(got[b].Attributes) != "map[user.id:bob]" {
		t.Errorf("attributes %v / %v", got[a].Attributes, got[b].Attributes)
	}
	// Without a refresh function, unknown indexes are simply left out.
	threads, st, _ = Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap})
	if st.KeyMapRefreshed || st.UnknownKeys != 2 || fmt.Sprint(byTID(threads)[a].Attributes) != "map[http.route:/a]" {
		t.Errorf("stats %+v", st)
	}
}

func TestSnapshotReadCap(t *testing.T) {
	p := startPub(t)
	p.do("threads 1")
	long := strings.Repeat("r", 200)
	a := tid(p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 1=GET 0=%s", long))
	loc := resolve(t, p.pid)
	threads, _, err := Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap, ReadCap: 64})
	if err != nil {
		t.Fatal(err)
	}
	th := byTID(threads)[a]
	// 28 header + 36 bytes: GET (5 bytes) fits, the 202-byte entry does not.
	if th.Record == nil || !th.Record.Truncated || fmt.Sprint(th.Attributes) != "map[http.request.method:GET]" {
		t.Fatalf("capped read: %+v", th)
	}
	threads, _, _ = Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap})
	if th := byTID(threads)[a]; th.Record == nil || th.Record.Truncated || th.Attributes["http.route"] != long {
		t.Fatalf("default cap: %+v", th)
	}
}

func TestSnapshotProcessGone(t *testing.T) {
	p := startPub(t)
	loc := resolve(t, p.pid)
	fmt.Fprintln(p.stdin, "exit")
	waitGone(t, p.pid)
	// A zombie (not reaped yet) still lists its leader: it is reported as
	// exited; a reaped process is an error.
	threads, _, err := Snapshot(p.pid, otepVar(loc), Options{})
	if err == nil {
		for _, th := range threads {
			if th.Reason != ReasonExited {
				t.Errorf("tid %d of an exited process: %q %v", th.TID, th.Reason, th.Err)
			}
		}
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	// The test is the parent: the process is gone once reaped, and the
	// cleanup's Wait reaps it; until then it is a zombie with no threads
	// to read, which Snapshot also reports.
	testenv.Eventually(t, fmt.Sprintf("pid %d to exit", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// TestCacheInvalidation: resolution is reused until the file-backed mappings
// change or the PID is another process.
func TestCacheInvalidation(t *testing.T) {
	c := NewCache("")
	calls := 0
	c.Resolve = func(string, int) (*tlsvar.Location, error) {
		calls++
		return &tlsvar.Location{Module: strconv.Itoa(calls)}, nil
	}
	self := os.Getpid()
	l1, err1 := c.Location(self)
	l2, err2 := c.Location(self)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if calls != 1 || l1 != l2 {
		t.Fatalf("not cached: %d calls", calls)
	}
	// Anonymous mappings (malloc, stacks) do not invalidate.
	anon, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(anon); err != nil {
			t.Error(err)
		}
	}()
	if _, err := c.Location(self); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatal("an anonymous mapping invalidated the cache")
	}
	// A new file mapping (what dlopen does) does.
	f, err := os.CreateTemp("", "otelctx-cache-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if l3, _ := c.Location(self); calls != 2 || l3.Module != "2" {
		t.Fatalf("file mapping did not invalidate: %d calls", calls)
	}
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Location(self); err != nil {
		t.Fatal(err)
	}
	if calls != 3 {
		t.Fatalf("unmapping did not invalidate: %d calls", calls)
	}
	// Failures are cached too.
	c.Resolve = func(string, int) (*tlsvar.Location, error) { calls++; return nil, tlsvar.ErrNotFound }
	c.Forget(self)
	for range 2 {
		if _, err := c.Location(self); !errors.Is(err, tlsvar.ErrNotFound) {
			t.Fatal(err)
		}
	}
	if calls != 4 || c.Resolutions() != 4 {
		t.Fatalf("failure not cached: %d calls", calls)
	}
	c.Retain(func(int) bool { return false })
	if c.Len() != 0 {
		t.Fatal("Retain kept an entry")
	}
	if _, err := c.Location(1<<22 + 1); err == nil || c.Len() != 0 {
		t.Fatal("a missing process was cached")
	}
}

// TestCacheTransientRetried: a transient resolution failure (the files could
// not be read this time) is not cached for the process: the next lookup
// resolves again and succeeds; a definitive failure stays cached.
func TestCacheTransientRetried(t *testing.T) {
	c := NewCache("")
	calls := 0
	c.Resolve = func(string, int) (*tlsvar.Location, error) {
		calls++
		if calls == 1 {
			return nil, fmt.Errorf("%w: open: too many open files", tlsvar.ErrTransient)
		}
		return &tlsvar.Location{Module: strconv.Itoa(calls)}, nil
	}
	self := os.Getpid()
	if _, err := c.Location(self); !errors.Is(err, tlsvar.ErrTransient) || c.Len() != 0 {
		t.Fatalf("first lookup: %v, %d entries; want ErrTransient, not cached", err, c.Len())
	}
	loc, err := c.Location(self)
	if err != nil || loc == nil || loc.Module != "2" || calls != 2 {
		t.Fatalf("second lookup: %v, %v after %d resolutions; want the retried resolution", loc, err, calls)
	}
	if l, _ := c.Location(self); l != loc || calls != 2 {
		t.Fatalf("success not cached: %d resolutions", calls)
	}
}

// TestCachePIDReuse: the same PID with another start time is re-resolved.
func TestCachePIDReuse(t *testing.T) {
	dir := t.TempDir()
	pidDir := filepath.Join(dir, "42")
	if err := os.MkdirAll(pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(start int) {
		stat := fmt.Sprintf("42 (a b) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", start)
		for name, content := range map[string]string{
			"stat": stat,
			"maps": "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n",
		} {
			if err := os.WriteFile(filepath.Join(pidDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := NewCache(dir)
	calls := 0
	c.Resolve = func(string, int) (*tlsvar.Location, error) { calls++; return &tlsvar.Location{}, nil }
	locate := func() {
		if _, err := c.Location(42); err != nil {
			t.Fatal(err)
		}
	}
	write(100)
	locate()
	locate()
	write(200)
	locate()
	if calls != 2 {
		t.Fatalf("%d resolutions, want 2", calls)
	}
}

// TestSnapshotAlreadyTraced: a thread held by another tracer is reported as
// "already traced" (no record), the others are read.
func TestSnapshotAlreadyTraced(t *testing.T) {
	p := startPub(t)
	p.do("threads 2")
	held := tid(p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/a"))
	other := tid(p.do("set 1 0af7651916cd43dd8448eb211c80319c b7ad6b7169203332 1 0=/b"))
	loc := resolve(t, p.pid)

	// The other tracer: a locked goroutine of this process (ptrace ties a
	// tracee to the tracer thread, so this thread holds it).
	ready, release, done := make(chan error), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.PtraceSeize(held); err != nil {
			ready <- err
			return
		}
		if err := unix.PtraceInterrupt(held); err != nil {
			ready <- err
			return
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(held, &ws, unix.WALL, nil); err != nil { // bounded: the thread stops at once
			ready <- err
			return
		}
		ready <- nil
		<-release
		_ = unix.PtraceDetach(held)
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	threads, st, err := Snapshot(p.pid, otepVar(loc), Options{KeyMap: keyMap})
	close(release)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	got := byTID(threads)
	if th := got[held]; th.Record != nil || th.Reason != ReasonAlreadyTraced || st.Ptrace.AlreadyTraced != 1 {
		t.Errorf("held thread: %+v (stats %+v)", th, st.Ptrace)
	}
	if th := got[other]; th.Record == nil || th.Attributes["http.route"] != "/b" {
		t.Errorf("other thread: %+v", th)
	}
	if st.Reasons[ReasonAlreadyTraced] != 1 {
		t.Errorf("reasons %v", st.Reasons)
	}
}

// TestSnapshotCanceled: a closed Done (the receiver shutting down) ends the
// snapshot before any thread is stopped; every thread is "not tried".
// TestSnapshotThreadCap: past MaxThreads, threads are left out of the
// snapshot and counted under ReasonThreadCap.
func TestSnapshotThreadCap(t *testing.T) {
	p := startPub(t)
	p.do("threads 4")
	threads, st, err := Snapshot(p.pid, otepVar(resolve(t, p.pid)), Options{KeyMap: keyMap, MaxThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != 2 || st.Reasons[ReasonThreadCap] != 3 || st.Ptrace.LeftOut != 3 {
		t.Fatalf("%d threads, %d counted %q (%d left out): want 2 and 3", len(threads), st.Reasons[ReasonThreadCap], ReasonThreadCap, st.Ptrace.LeftOut)
	}
}

func TestSnapshotCanceled(t *testing.T) {
	p := startPub(t)
	p.do("threads 2")
	p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/api/v1/users")
	done := make(chan struct{})
	close(done)
	threads, st, err := Snapshot(p.pid, otepVar(resolve(t, p.pid)), Options{KeyMap: keyMap, Done: done})
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) < 3 || st.Records != 0 || st.Reasons[ReasonNotTried] != len(threads) {
		t.Fatalf("threads %+v, stats %+v: want every thread %q", threads, st, ReasonNotTried)
	}
	for _, ts := range st.Ptrace.Threads {
		if ts.Stopped != 0 {
			t.Errorf("tid %d stopped for %v", ts.TID, ts.Stopped)
		}
	}
}

// TestSnapshotRecordInFileMapping: a record pointer into a file the
// publisher mapped without touching it (on FUSE, reading it could block
// the reader, and the stopped thread, indefinitely) is not read.
func TestSnapshotRecordInFileMapping(t *testing.T) {
	p := startPub(t)
	p.do("threads 2")
	good := tid(p.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/api/v1/users"))
	path := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(path, make([]byte, 65536), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := p.do("mapfile %s", path)[0]
	bad := tid(p.do("point 1 %s", addr))
	threads, _, err := Snapshot(p.pid, otepVar(resolve(t, p.pid)), Options{KeyMap: keyMap})
	if err != nil {
		t.Fatal(err)
	}
	got := byTID(threads)
	if got[good].Record == nil {
		t.Fatalf("tid %d: no record (%s: %v)", good, got[good].Reason, got[good].Err)
	}
	if th := got[bad]; th.Record != nil || th.Reason != ReasonRead || !errors.Is(th.Err, safemem.ErrFileBacked) {
		t.Fatalf("tid %d: record %v, reason %q, err %v; want no record, %q, ErrFileBacked", bad, th.Record, th.Reason, th.Err, ReasonRead)
	}
}

// fakeProc writes the stat and maps a Cache reads for pid under dir.
func fakeProc(t *testing.T, dir string, pid int) {
	t.Helper()
	pidDir := filepath.Join(dir, strconv.Itoa(pid))
	stat := fmt.Sprintf("%d (a b) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0", pid)
	if err := os.MkdirAll(pidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pidDir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pidDir, "maps"), []byte("00400000-00401000 r-xp 00000000 08:01 1 /bin/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// blockingResolver blocks the resolutions of the PIDs in block until release
// is closed and counts the calls per PID.
type blockingResolver struct {
	block   map[int]bool
	release chan struct{}
	mu      sync.Mutex
	calls   map[int]int
}

func (b *blockingResolver) resolve(_ string, pid int) (*tlsvar.Location, error) {
	b.mu.Lock()
	b.calls[pid]++
	b.mu.Unlock()
	if b.block[pid] {
		<-b.release
	}
	return &tlsvar.Location{}, nil
}

func (b *blockingResolver) count(pid int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[pid]
}

func waitUnstuck(t *testing.T, c *Cache) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Abandoned() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d resolutions still counted as blocked", c.Abandoned())
		}
		runtime.Gosched() // the released resolutions' goroutines finish
	}
}

// TestCacheResolveTimeout: a resolution that blocks (a module on a file
// system that does not answer) is given up after the timeout, the failure
// is cached for the process until RetryBlocked has passed, and past
// maxAbandoned blocked ones (one per process) the cache refuses to start
// more; once they return, a process refused as busy is resolved again after
// RetryBlocked, without being forgotten.
func TestCacheResolveTimeout(t *testing.T) {
	dir := t.TempDir()
	c := NewCache(dir)
	c.ResolveTimeout = 20 * time.Millisecond
	now := time.Unix(1000, 0)
	c.Now = func() time.Time { return now }
	r := &blockingResolver{block: map[int]bool{}, release: make(chan struct{}), calls: map[int]int{}}
	c.Resolve = r.resolve
	for pid := 100; pid <= 100+maxAbandoned; pid++ {
		fakeProc(t, dir, pid)
		r.block[pid] = true
	}
	// Each process its own user: the host's bound is what refuses.
	if _, err := c.LocationFor(100, 100); !errors.Is(err, ErrResolveTimeout) {
		t.Fatalf("blocked resolution: %v, want ErrResolveTimeout", err)
	}
	// Cached: no second blocked resolution for the same process.
	if _, err := c.LocationFor(100, 100); !errors.Is(err, ErrResolveTimeout) || r.count(100) != 1 {
		t.Fatalf("second lookup: %v after %d resolutions, want the cached timeout after 1", err, r.count(100))
	}
	for pid := 101; pid < 100+maxAbandoned; pid++ {
		if _, err := c.LocationFor(pid, pid); !errors.Is(err, ErrResolveTimeout) {
			t.Fatalf("blocked resolution of %d: %v", pid, err)
		}
	}
	last := 100 + maxAbandoned
	if _, err := c.LocationFor(last, last); !errors.Is(err, ErrResolveBusy) || c.Abandoned() != maxAbandoned {
		t.Fatalf("with %d blocked: %v, want ErrResolveBusy", c.Abandoned(), err)
	}
	close(r.release)
	waitUnstuck(t, c)
	if _, err := c.LocationFor(last, last); !errors.Is(err, ErrResolveBusy) {
		t.Fatalf("before RetryBlocked: %v, want the cached ErrResolveBusy", err)
	}
	now = now.Add(DefaultRetryBlocked)
	c.ResolveTimeout = time.Minute // this one returns at once: a loaded host must not time it out
	if loc, err := c.LocationFor(last, last); err != nil || loc == nil {
		t.Fatalf("RetryBlocked after the blocked ones returned: %v, %v", loc, err)
	}
}

// TestCacheUserShare: the processes of one user (nobody) wedge their
// resolutions (a module on a file system that does not answer): that user
// leaves at most maxAbandonedPerUser of them blocked, its others are
// refused as busy, and another user's (root's) processes still resolve,
// including one that wedges too.
func TestCacheUserShare(t *testing.T) {
	dir := t.TempDir()
	const nobody, root = 65534, 0
	c := NewCache(dir)
	c.ResolveTimeout = 20 * time.Millisecond
	r := &blockingResolver{block: map[int]bool{301: true}, release: make(chan struct{}), calls: map[int]int{}}
	for pid := 200; pid < 200+maxAbandoned; pid++ {
		fakeProc(t, dir, pid)
		r.block[pid] = true
	}
	c.Resolve = r.resolve
	defer waitUnstuck(t, c)
	defer close(r.release)
	for pid := 200; pid < 200+maxAbandoned; pid++ {
		_, err := c.LocationFor(pid, nobody)
		if pid < 200+maxAbandonedPerUser && !errors.Is(err, ErrResolveTimeout) {
			t.Fatalf("nobody's wedged process %d: %v, want ErrResolveTimeout", pid, err)
		}
		if pid >= 200+maxAbandonedPerUser && !errors.Is(err, ErrResolveBusy) {
			t.Fatalf("nobody's wedged process %d with %d blocked: %v, want ErrResolveBusy", pid, c.Abandoned(), err)
		}
	}
	fakeProc(t, dir, 300)
	c.ResolveTimeout = time.Minute // this one returns at once: a loaded host must not time it out
	if loc, err := c.LocationFor(300, root); err != nil || loc == nil {
		t.Fatalf("root's process beside nobody's %d blocked: %v, %v", c.Abandoned(), loc, err)
	}
	fakeProc(t, dir, 301)
	c.ResolveTimeout = 20 * time.Millisecond
	if _, err := c.LocationFor(301, root); !errors.Is(err, ErrResolveTimeout) || c.Abandoned() != maxAbandonedPerUser+1 {
		t.Fatalf("root's wedged process: %v with %d blocked, want ErrResolveTimeout and %d", err, c.Abandoned(), maxAbandonedPerUser+1)
	}
}

// TestCacheStuckPIDHoldsOneSlot: a process whose resolution stays blocked
// across many retry periods is not resolved again until it returns, so it
// holds one of the maxAbandoned slots and every other process still
// resolves.
func TestCacheStuckPIDHoldsOneSlot(t *testing.T) {
	dir := t.TempDir()
	const stuckPID, otherPID = 41, 42
	fakeProc(t, dir, stuckPID)
	fakeProc(t, dir, otherPID)
	c := NewCache(dir)
	c.ResolveTimeout = 20 * time.Millisecond
	now := time.Unix(1000, 0)
	c.Now = func() time.Time { return now }
	r := &blockingResolver{block: map[int]bool{stuckPID: true}, release: make(chan struct{}), calls: map[int]int{}}
	c.Resolve = r.resolve
	for period := 0; period < 3*maxAbandoned; period++ {
		if _, err := c.Location(stuckPID); !errors.Is(err, ErrResolveTimeout) {
			t.Fatalf("period %d: stuck process: %v, want ErrResolveTimeout", period, err)
		}
		// From here on the stuck process's timeout is cached, and the other
		// resolves at once: a loaded host must not time that out.
		c.ResolveTimeout = time.Minute
		c.Forget(otherPID)
		if loc, err := c.Location(otherPID); err != nil || loc == nil {
			t.Fatalf("period %d: other process with %d blocked: %v, %v", period, c.Abandoned(), loc, err)
		}
		now = now.Add(DefaultRetryBlocked)
	}
	if n, a := r.count(stuckPID), c.Abandoned(); n != 1 || a != 1 {
		t.Fatalf("stuck process: %d resolutions started, %d blocked; want 1 and 1", n, a)
	}
	close(r.release)
	waitUnstuck(t, c)
	if loc, err := c.Location(stuckPID); err != nil || loc == nil || r.count(stuckPID) != 2 {
		t.Fatalf("after it returned: %v, %v, %d resolutions; want a location from the 2nd", loc, err, r.count(stuckPID))
	}
}

// TestReadable: a snapshot reads only a variable of a schema read through
// ptrace, with its walk when it has one, and the schema's own variable.
func TestReadable(t *testing.T) {
	loc := &tlsvar.Location{Symbol: tlsvar.SymbolName}
	if err := readable(otepVar(loc)); err != nil {
		t.Errorf("OTEP 4947 variable: %v", err)
	}
	for name, v := range map[string]schema.Variable{
		"no schema":          {Location: loc},
		"no location":        {Schema: &otep4947.Schema},
		"a buffer's schema":  {Schema: &ddring.Schema, Location: loc},
		"a walk not given":   {Schema: &nodejs.Schema, Location: &tlsvar.Location{Symbol: tlsvar.NodeSymbolName}},
		"another's variable": otepVar(&tlsvar.Location{Symbol: tlsvar.NodeSymbolName}),
	} {
		if err := readable(v); err == nil {
			t.Errorf("%s: readable", name)
		}
	}
}
