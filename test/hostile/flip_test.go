// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// flipFor is how long publisher A flips its page under the collector: the
// test's duration (the longer, the more reads race a flip), not a wait
// for something. flipEnv overrides it.
const (
	flipFor = 60 * time.Second
	flipEnv = "OTELCTX_FLIP_FOR"
)

// Deadlines for what must happen (Scaled): a wedged collector never gets
// there, a working one in well under a second.
const (
	announceWithin = 60 * time.Second
	exitWithin     = 30 * time.Second
)

// A thread in state D at every sample for stuckAfter is stuck: a FUSE
// wait lasts until the file system answers, a disk read milliseconds.
const (
	sampleEvery = 100 * time.Millisecond
	stuckAfter  = time.Second
)

// readerComm is the name of the collector's memory reader helper
// (internal/proc/remote, helper_serve.go).
const readerComm = "otelctx-reader"

// TestFlippingPayloadNeverHoldsTheCollector: publisher A flips the page
// of its payload, as fast as it can, between anonymous memory holding the
// payload and a page of a FUSE file whose READs this process holds, with
// a new stamp each time the payload is back, so that every poll reads it.
// The page check before a read cannot win that race: a read may fault in
// the file's page and wait for ever. It must wait in the reader helper,
// never in the collector's main process: the built distribution (default
// read settings, thread_sampler auto; collection_interval 100ms and
// discovery_interval 200ms) makes no READ of the file from its main
// process, has no thread stuck in state D, announces a publisher started
// after flipFor of flipping, and exits on SIGTERM; started again the same
// way, it is reaped at once after SIGKILL.
func TestFlippingPayloadNeverHoldsTheCollector(t *testing.T) {
	testFlipping(t, flipCase{command: "flip", sampler: processctxextension.ThreadSamplerAuto})
}

// TestFlippingRecordNeverHoldsTheCollector: the same with the page of
// A's worker's OTEP 4947 record, which the ptrace sampler reads with
// process_vm_readv, here every 100ms (thread_context.interval; 30s by
// default). The eBPF samplers (auto, follow, ebpf) read records in the
// kernel with bpf_probe_read_user, which fails on a page that is not
// resident rather than fault it in: they never read a record from here.
func TestFlippingRecordNeverHoldsTheCollector(t *testing.T) {
	testFlipping(t, flipCase{command: "fliprecord", record: true, sampler: processctxextension.ThreadSamplerPtrace,
		sets: []string{"--set=extensions::process_ctx::thread_context::interval=100ms"}})
}

// flipCase is what A flips and how the collector reads it.
type flipCase struct {
	command string   // the hostile publisher's command: flip or fliprecord
	record  bool     // A's worker publishes a record first (run)
	sampler string   // thread_sampler
	sets    []string // more --set flags for the collector
}

func testFlipping(t *testing.T, fc flipCase) {
	testenv.RequireRoot(t)
	t.Run("SIGTERM", func(t *testing.T) {
		w := startFlipping(t, fc)
		w.watch(t)
		w.announcesNewcomer(t)
		start := time.Now()
		w.col.stopWithin(t, testenv.Scaled(exitWithin))
		t.Logf("SIGTERM to exit: %v", time.Since(start))
		w.logLeftBehind(t)
	})
	// SIGKILL once a READ is held: the moment that kept the collector
	// from exiting before (the whole flipping period is SIGTERM's case).
	t.Run("SIGKILL", func(t *testing.T) {
		w := startFlipping(t, fc)
		w.waitHeldRead(t)
		defer func() { w.logLeftBehind(t) }() // also when the wait below fails
		start := time.Now()
		if err := w.col.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		testenv.EventuallyWithin(t, exitWithin, "the collector reaped after SIGKILL", w.col.Exited)
		t.Logf("SIGKILL to reaped: %v", time.Since(start))
	})
}

// flipWorld is one run: the FUSE file, hostile publisher A flipping a
// page over it, and the built distribution watching A and, later, a
// well-behaved publisher, by executable names no other test binary's
// publishers have (the ptrace sampler stops every thread it watches).
type flipWorld struct {
	fs      *testfuse.FS
	a       *hostile
	col     *collector
	pub     string // the well-behaved publisher's executable
	pubArgs []string
	helpers []int // the collector's reader helpers seen
}

func startFlipping(t *testing.T, fc flipCase) *flipWorld {
	t.Helper()
	w := &flipWorld{}
	// The first cleanup registered runs last: after fs.Close freed reads.
	t.Cleanup(func() { w.checkHelpersGone(t) })
	w.fs = fuseFile(t)
	dir, suffix := t.TempDir(), "-"+strconv.Itoa(os.Getpid())
	a := copyExecutable(t, buildHostile(t), filepath.Join(dir, "hostile"+suffix))
	pub, args := threadpub.Build(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	w.pub, w.pubArgs = copyExecutable(t, pub, filepath.Join(dir, "threadpub"+suffix)), args
	w.a = &hostile{startDetached(t, "hostile", a)}
	if fc.record {
		w.a.run(0) // a key the map names: no key-map refresh reads the payload
	}
	w.col = startFlipCollector(t, fc.sampler, []string{filepath.Base(a), filepath.Base(w.pub)}, fc.sets...)
	// Before the collector's cleanup, which waits for it to exit: a READ
	// the file system holds keeps a process from exiting until it aborts.
	t.Cleanup(w.fs.Close)
	eventually(t, "A announced", func() bool { return w.col.announced(t, w.a.PID, "hostile") })
	page := w.a.Do("%s %s", fc.command, w.fs.Path())[0]
	t.Logf("A (pid %d) flips its page %s over %s; the collector is pid %d", w.a.PID, page, w.fs.Path(), w.col.Cmd.Process.Pid)
	return w
}

// startFlipCollector runs the distribution watching the executables
// named exes (discovery every 200ms), with thread_sampler sampler.
func startFlipCollector(t *testing.T, sampler string, exes []string, sets ...string) *collector {
	t.Helper()
	bin := testenv.DistBinary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "events.jsonl")
	cfg := distrun.Config{CollectionInterval: 100 * time.Millisecond, DiscoveryInterval: 200 * time.Millisecond,
		ThreadSampler: sampler, EntityInterval: time.Minute, Entities: out}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", path,
		"--set=extensions::process_ctx::include::executables=[" + strings.Join(exes, ",") + "]"}, sets...)
	return &collector{distrun.Start(t, bin, filepath.Join(dir, "collector.log"), args...), out}
}

// copyExecutable copies the executable src to dst.
func copyExecutable(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// flipPeriod is flipFor, or flipEnv's duration.
func flipPeriod(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(flipEnv)
	if v == "" {
		return flipFor
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", flipEnv, v)
	}
	return d
}

// watch samples, every sampleEvery while A flips, the state of every
// thread of the collector's main process and of its reader helpers. A
// main-process thread stuck in D fails the test; a helper's is what the
// helper is for, and logged. Then it logs the READs the file system got:
// a thread waiting for a held READ sleeps in S until a signal comes (in D
// after a fatal one), so the READ's thread tells who waits for it, and a
// main-process thread stuck in D is one waiting elsewhere (a lock).
func (w *flipWorld) watch(t *testing.T) {
	t.Helper()
	pid := w.col.Cmd.Process.Pid
	mainRuns, helperRuns := dRuns{}, dRuns{}
	reported := map[int]bool{}
	helperStuck := map[int]thread{}
	samples, period := 0, flipPeriod(t)
	start := time.Now()
	end := start.Add(period)
	firstRead := "none" // when the file system got its first READ, to a sample
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for now := start; now.Before(end); now = <-tick.C {
		if w.col.Exited() {
			t.Fatalf("the collector exited while A flipped: %v", w.col.Err())
		}
		samples++
		select {
		case <-w.fs.ReadReceived():
			if firstRead == "none" {
				firstRead = now.Sub(start).String()
			}
		default:
		}
		for _, th := range mainRuns.update(now, pid) {
			if !reported[th.tid] {
				reported[th.tid] = true
				t.Errorf("thread %d (%s) of the collector's main process in state D for %v: a read waits in the collector itself",
					th.tid, th.comm, now.Sub(mainRuns[th.tid]))
			}
		}
		for _, h := range readerHelpers(pid) {
			if !slices.Contains(w.helpers, h) {
				w.helpers = append(w.helpers, h)
			}
		}
		for _, th := range helperRuns.update(now, w.helpers...) {
			if _, ok := helperStuck[th.tid]; !ok {
				helperStuck[th.tid] = th
				t.Logf("reader helper thread %d (%s) in state D for %v (expected: it waits for the held READ)", th.tid, th.comm, now.Sub(helperRuns[th.tid]))
			}
		}
	}
	t.Logf("%d samples of the collector's threads in %v: %d main-process thread(s) stuck in D, %d reader helper thread(s) stuck in D (helpers %v)",
		samples, period, len(reported), len(helperStuck), w.helpers)
	t.Logf("first READ: %s into the flipping; the collector logged an abandoned read: %v",
		firstRead, strings.Contains(w.col.Log(), "a read of a process's memory did not return"))
	w.logReads(t)
}

// waitHeldRead waits until the file system holds a READ (a read raced a
// flip), then checks who sent it.
func (w *flipWorld) waitHeldRead(t *testing.T) {
	t.Helper()
	start := time.Now()
	pid := w.col.Cmd.Process.Pid
	testenv.EventuallyWithin(t, announceWithin, "a READ of the FUSE file held", func() bool {
		for _, h := range readerHelpers(pid) {
			if !slices.Contains(w.helpers, h) {
				w.helpers = append(w.helpers, h)
			}
		}
		return w.fs.Pending() > 0
	})
	t.Logf("a READ held %v into the flipping", time.Since(start))
	w.logReads(t)
}

// logReads logs the READs the file system got, by process, with the
// state of the thread that waits for each now, and fails the test for
// one from the collector's main process.
func (w *flipWorld) logReads(t *testing.T) {
	t.Helper()
	pid := w.col.Cmd.Process.Pid
	reads := w.fs.Reads()
	by := map[string]int{}
	for _, r := range reads {
		who := "another process"
		switch {
		case r.PID == pid:
			who = "the collector's main process"
		case slices.Contains(w.helpers, r.PID):
			who = "the reader helper"
		case r.PID == w.a.PID:
			who = "A itself"
		}
		state := "gone"
		if th, ok := readStat(fmt.Sprintf("/proc/%d/task/%d/stat", r.PID, r.TID)); ok {
			state = string(th.state)
		}
		by[fmt.Sprintf("%s, pid %d, thread %d (%s) now in state %s", who, r.PID, r.TID, r.Comm, state)]++
	}
	t.Logf("the FUSE file got %d READs, %d held now: %v", len(reads), w.fs.Pending(), by)
	for _, r := range reads {
		if r.PID == pid {
			t.Errorf("a READ of the FUSE file from the collector's main process: %+v", r)
		}
	}
}

// announcesNewcomer starts a well-behaved publisher and requires it
// announced: the collector still discovers and reads.
func (w *flipWorld) announcesNewcomer(t *testing.T) {
	t.Helper()
	start := time.Now()
	b := startDetached(t, "threadpub", w.pub, w.pubArgs...)
	b.Do("threads 1")
	testenv.EventuallyEvery(t, announceWithin, 50*time.Millisecond, "a publisher started after the flipping announced",
		func() bool { return w.col.announced(t, b.PID, "threadpub") })
	t.Logf("a publisher started after the flipping announced %v after its start", time.Since(start))
}

// logLeftBehind logs what is still there after the signal, before the
// cleanup aborts the file system: a process with a thread waiting for a
// READ lives until the file system answers or is aborted.
func (w *flipWorld) logLeftBehind(t *testing.T) {
	t.Helper()
	if pid := w.col.Cmd.Process.Pid; !w.col.Exited() {
		t.Logf("the collector (pid %d) is still there, threads not in S: %v (%d READs held)", pid, notSleeping(pid), w.fs.Pending())
	}
	for _, h := range w.helpers {
		if ths := threadsOf(h); len(ths) > 0 {
			t.Logf("reader helper %d still there after the collector, threads not in S: %v (%d READs held)", h, notSleeping(h), w.fs.Pending())
		}
	}
}

// notSleeping lists pid's threads in a state other than S, as TID:STATE.
func notSleeping(pid int) []string {
	var l []string
	for _, th := range threadsOf(pid) {
		if th.state != 'S' {
			l = append(l, fmt.Sprintf("%d:%c", th.tid, th.state))
		}
	}
	return l
}

// checkHelpersGone fails the test if a reader helper is still alive once
// every cleanup ran (the file system aborted): nothing is left stuck.
func (w *flipWorld) checkHelpersGone(t *testing.T) {
	t.Helper()
	for _, h := range w.helpers {
		testenv.EventuallyWithin(t, exitWithin, fmt.Sprintf("reader helper %d gone once the FUSE file system was aborted", h), func() bool {
			st, ok := readStat("/proc/" + strconv.Itoa(h) + "/stat")
			return !ok || st.comm != readerComm || st.state == 'Z'
		})
	}
}

// thread is one line of /proc/PID/task/TID/stat.
type thread struct {
	tid, ppid int
	comm      string
	state     byte
}

// readStat reads a stat file: only stat, which takes no lock a stuck
// fault holds (cmdline and environ read the process's memory).
func readStat(path string) (thread, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return thread{}, false
	}
	// "TID (COMM) S PPID ...": the name may hold anything, ") " included.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndex(b, []byte(") "))
	if open < 0 || end < open {
		return thread{}, false
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return thread{}, false
	}
	tid, _ := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	ppid, _ := strconv.Atoi(f[1])
	return thread{tid: tid, ppid: ppid, comm: string(b[open+1 : end]), state: f[0][0]}, true
}

// threadsOf is every thread of pid now (none once it is gone).
func threadsOf(pid int) []thread {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, _ := os.ReadDir(dir)
	var ths []thread
	for _, e := range ents {
		if th, ok := readStat(dir + "/" + e.Name() + "/stat"); ok {
			ths = append(ths, th)
		}
	}
	return ths
}

// readerHelpers is the children of pid named readerComm (the kernel here
// may lack /proc/PID/task/TID/children: every process's stat is read).
func readerHelpers(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var hs []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat("/proc/" + e.Name() + "/stat"); ok && st.ppid == pid && st.comm == readerComm {
			hs = append(hs, p)
		}
	}
	return hs
}

// dRuns follows threads in state D from sample to sample: the time of the
// first sample of each one's current run in D.
type dRuns map[int]time.Time

// update takes the sample at now of the threads of pids and returns those
// in D at every sample for stuckAfter or more.
func (r dRuns) update(now time.Time, pids ...int) []thread {
	inD := map[int]bool{}
	var stuck []thread
	for _, pid := range pids {
		for _, th := range threadsOf(pid) {
			if th.state != 'D' {
				continue
			}
			inD[th.tid] = true
			since, ok := r[th.tid]
			if !ok {
				r[th.tid] = now
			} else if now.Sub(since) >= stuckAfter {
				stuck = append(stuck, th)
			}
		}
	}
	for tid := range r {
		if !inD[tid] {
			delete(r, tid)
		}
	}
	return stuck
}
