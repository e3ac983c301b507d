// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/cpulist"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/nodejs"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// mainRunner lets goleak check after threadpub.Main removed its builds.
type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int { return threadpub.Main(r.m) }

// unprivEnv makes the test binary try New and print the error (run by
// TestUnprivilegedIsUnavailable as an unprivileged user).
const unprivEnv = "OTELCTX_SAMPLER_TEST_UNPRIV"

// prctlOnceEnv makes the test binary name a mapping OTEL_CTX once and exit
// (another process, for TestPrctlLimitedPerProcess).
const prctlOnceEnv = "OTELCTX_SAMPLER_TEST_PRCTL_ONCE"

func TestMain(m *testing.M) {
	if os.Getenv(prctlOnceEnv) != "" {
		m, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, "OTEL_CTX")
		os.Exit(0)
	}
	if os.Getenv(unprivEnv) != "" {
		s, err := New(Options{})
		if err == nil {
			s.Close()
			fmt.Println("loaded")
			os.Exit(0)
		}
		fmt.Printf("unavailable=%v %v\n", errors.Is(err, ErrUnavailable), err)
		os.Exit(0)
	}
	goleak.VerifyTestMain(mainRunner{m}, testenv.LongLived...)
}

// collector gathers what Run delivers; tests wait on conditions over it.
type collector struct {
	mu      sync.Mutex
	samples []Sample
	prctl   []prctlSeen
	notify  chan struct{}
}

type prctlSeen struct {
	pid int
	at  time.Time
}

func (c *collector) poke() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *collector) onSample(s Sample) {
	c.mu.Lock()
	c.samples = append(c.samples, s)
	c.mu.Unlock()
	c.poke()
}

func (c *collector) onPrctl(pid int) {
	now := time.Now()
	c.mu.Lock()
	c.prctl = append(c.prctl, prctlSeen{pid, now})
	c.mu.Unlock()
	c.poke()
}

// waitFor waits until cond (called with c.mu held) holds, at most timeout.
func (c *collector) waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			return false
		}
	}
}

// matching returns the samples of tid taken after boot ns since.
func (c *collector) matching(tid int, since uint64) []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Sample
	for _, s := range c.samples {
		if s.TID == tid && s.BootNs > since {
			out = append(out, s)
		}
	}
	return out
}

func bootNow(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// newSampler loads and attaches for real; a kernel that refuses skips
// (fails under CI=true).
func newSampler(t testing.TB, opts Options) *Sampler {
	t.Helper()
	testenv.RequireRoot(t)
	s, err := New(opts)
	if errors.Is(err, ErrUnavailable) {
		testenv.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// startSampler also runs Run with a collector until the test ends.
func startSampler(t testing.TB, opts Options) (*Sampler, *collector) {
	t.Helper()
	s := newSampler(t, opts)
	c := &collector{notify: make(chan struct{}, 1)}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(c.onSample, c.onPrctl) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-runErr:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after Close")
		}
	})
	return s, c
}

// encode is the record threadpub.c builds for r (attributes in key order,
// as threadpub.Set sends them): what the sampler must deliver byte for byte.
func encode(r threadpub.Record) []byte {
	b := make([]byte, 28)
	copy(b, r.TraceID[:])
	copy(b[16:], r.SpanID[:])
	b[24] = 1
	b[25] = r.Flags
	keys := make([]int, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		v := r.Attrs[uint8(k)]
		b = append(b, uint8(k), uint8(len(v)))
		b = append(b, v...)
	}
	binary.NativeEndian.PutUint16(b[26:], uint16(len(b)-28))
	return b
}

func record(seed byte) threadpub.Record {
	var r threadpub.Record
	for i := range r.TraceID {
		r.TraceID[i] = seed + byte(i)
	}
	for i := range r.SpanID {
		r.SpanID[i] = seed ^ byte(0x80+i)
	}
	r.Flags = 1
	r.Attrs = map[uint8]string{0: "/api/orders", 1: "GET", 2: "user-" + string(rune('a'+seed%26))}
	return r
}

// spinUntil makes worker k busy (on CPU, where the perf event samples it)
// in 200 ms bursts until cond holds over the samples, at most ~15 s.
func spinUntil(t *testing.T, p *threadpub.Publisher, k int, c *collector, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 75; i++ {
		p.Do("spin %d 200", k)
		// The burst's samples may still be in the ring buffer or on their
		// way through Run: give them a moment before the next burst.
		if c.waitFor(100*time.Millisecond, cond) {
			return
		}
	}
	t.Fatalf("%s: not seen after ~15 s of spinning", what)
}

func hasRecord(samples []Sample) bool {
	for _, s := range samples {
		if s.Record != nil {
			return true
		}
	}
	return false
}

// muslStartupPlacement: musl's start-up modules are static TLS on x86-64;
// on aarch64 the resolver reads them through the DTV, which musl fills for
// every thread (tlsvar's setMuslPlacement).
func muslStartupPlacement() tlsvar.Placement {
	if runtime.GOARCH == "arm64" {
		return tlsvar.DynamicTLS
	}
	return tlsvar.StaticTLS
}

func TestSamplesCarryPublishedRecord(t *testing.T) {
	cells := []struct {
		cell threadpub.Cell
		want tlsvar.Placement
	}{
		{threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC}, tlsvar.StaticTLS},
		{threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC}, tlsvar.StaticTLS},
		{threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.DlopenAfterExhaustion, Dialect: threadpub.TLSDESC}, tlsvar.DynamicTLS},
		{threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.DlopenAfterExhaustion, Dialect: threadpub.GD, Writer: threadpub.ValidFlip}, tlsvar.DynamicTLS},
		{threadpub.Cell{Libc: threadpub.Musl, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC}, 0},
		{threadpub.Cell{Libc: threadpub.Musl, Where: threadpub.Exe, Dialect: threadpub.TLSDESC}, muslStartupPlacement()},
	}
	s, c := startSampler(t, Options{})
	for i, tc := range cells {
		t.Run(tc.cell.String(), func(t *testing.T) {
			p := threadpub.Start(t, tc.cell)
			p.Threads(2)
			rec := record(byte(17 * (i + 1)))
			truth := p.Set(0, rec)
			loc, err := tlsvar.Resolve("/proc", p.PID)
			if err != nil {
				t.Fatalf("tlsvar.Resolve: %v", err)
			}
			t.Logf("recipe: %s", loc)
			if tc.want != 0 && loc.Placement != tc.want {
				t.Fatalf("placement %s, this cell should be %s", loc.Placement, tc.want)
			}
			if err := s.Track(p.PID, loc); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Untrack(p.PID); err != nil {
					t.Error(err)
				}
			}()

			// 1. The published record, byte for byte.
			want := encode(rec)
			spinUntil(t, p, 0, c, "a sample with the record", func() bool {
				for _, smp := range c.samples {
					if smp.TID == truth.TID && smp.Record != nil {
						return true
					}
				}
				return false
			})
			got := c.matching(truth.TID, 0)
			for _, smp := range got {
				if smp.PID != p.PID || smp.OffCPU {
					t.Errorf("sample %+v: want pid %d, on-CPU", smp, p.PID)
				}
				if !bytes.Equal(smp.Record, want) {
					t.Fatalf("record bytes\n got %x\nwant %x", smp.Record, want)
				}
				if d := time.Since(smp.Time); d < 0 || d > time.Minute {
					t.Errorf("sample time %v is %v from now", smp.Time, d)
				}
			}
			r, err := threadctx.Parse(got[0].Record)
			if err != nil {
				t.Fatal(err)
			}
			if r.TraceID != threadctx.TraceID(rec.TraceID) || r.SpanID != threadctx.SpanID(rec.SpanID) || r.TraceFlags != rec.Flags || r.Truncated {
				t.Errorf("parsed %+v, want %x %x flags %d", r, rec.TraceID, rec.SpanID, rec.Flags)
			}
			if len(r.Attrs) != 3 || r.Attrs[0].Value != rec.Attrs[0] || r.Attrs[1].Value != rec.Attrs[1] || r.Attrs[2].Value != rec.Attrs[2] {
				t.Errorf("attrs %+v, want %v", r.Attrs, rec.Attrs)
			}
			t.Logf("%d samples of tid %d carried the record", len(got), truth.TID)

			// 2. Withdrawn: NULL slot (swap writer) → reported, empty;
			// flip writer → the record with valid=0.
			p.Clear(0)
			since := bootNow(t)
			spinUntil(t, p, 0, c, "a sample after clear", func() bool {
				for _, smp := range c.samples {
					if smp.TID == truth.TID && smp.BootNs > since {
						return true
					}
				}
				return false
			})
			for _, smp := range c.matching(truth.TID, since) {
				if tc.cell.Writer == threadpub.ValidFlip {
					if _, err := threadctx.Parse(smp.Record); !errors.Is(err, threadctx.ErrInvalid) {
						t.Fatalf("flip writer after clear: %x parses with %v, want ErrInvalid", smp.Record, err)
					}
				} else if smp.Record != nil || smp.NotAllocated {
					t.Fatalf("after clear: %+v, want a NULL-slot sample", smp)
				}
			}

			// 3. A thread that never touched the variable: no record; for a
			// dynamic TLS module in glibc its block is not even allocated.
			info := p.Info(1)
			since = bootNow(t)
			spinUntil(t, p, 1, c, "a sample of the untouched thread", func() bool {
				for _, smp := range c.samples {
					if smp.TID == info.TID && smp.BootNs > since {
						return true
					}
				}
				return false
			})
			for _, smp := range c.matching(info.TID, since) {
				if smp.Record != nil {
					t.Fatalf("untouched thread: %+v has a record", smp)
				}
				if loc.Placement == tlsvar.DynamicTLS && loc.Libc == tlsvar.Glibc && !smp.NotAllocated {
					t.Errorf("untouched thread, glibc dynamic TLS: %+v, want NotAllocated", smp)
				}
			}
		})
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.Samples == 0 || st.Emitted == 0 {
		t.Errorf("stats %+v: want samples and emitted records", st)
	}
}

func TestUntrackedProcessesAreNotSampled(t *testing.T) {
	s, c := startSampler(t, Options{})
	cell := threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC}
	tracked, other := threadpub.Start(t, cell), threadpub.Start(t, cell)
	tracked.Threads(1)
	other.Threads(1)
	tt := tracked.Set(0, record(1))
	other.Set(0, record(2))
	loc, err := tlsvar.Resolve("/proc", tracked.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Track(tracked.PID, loc); err != nil {
		t.Fatal(err)
	}
	other.Do("spin 0 300")
	// The ring buffer is FIFO: once a sample of the tracked process taken
	// after the untracked burst has arrived, any sample of the burst would
	// have arrived before it.
	after := bootNow(t)
	spinUntil(t, tracked, 0, c, "a tracked sample after the untracked burst", func() bool {
		for _, smp := range c.samples {
			if smp.TID == tt.TID && smp.BootNs > after {
				return true
			}
		}
		return false
	})
	c.mu.Lock()
	for _, smp := range c.samples {
		if smp.PID != tracked.PID {
			t.Errorf("sample of untracked pid %d: %+v", smp.PID, smp)
		}
	}
	c.mu.Unlock()

	// Untrack: the tracked process is no longer read either.
	if err := s.Untrack(tracked.PID); err != nil {
		t.Fatal(err)
	}
	if err := s.Untrack(tracked.PID); err != nil {
		t.Fatalf("second Untrack: %v", err)
	}
	since := bootNow(t)
	tracked.Do("spin 0 300")
	// Flush: track the other process and wait for one of its samples.
	ot := other.Info(0)
	if err := s.Track(other.PID, loc); err != nil { // same binary: same recipe
		t.Fatal(err)
	}
	spinUntil(t, other, 0, c, "a sample of the newly tracked process", func() bool {
		for _, smp := range c.samples {
			if smp.TID == ot.TID && smp.BootNs > since {
				return true
			}
		}
		return false
	})
	if n := len(c.matching(tt.TID, since)); n != 0 {
		t.Errorf("%d samples of an untracked process after Untrack", n)
	}
}

func TestOffCPU(t *testing.T) {
	_, c := startSamplerTracking(t, Options{OffCPU: true})
	p, truth, want := c.p, c.truth, c.want
	// Parking after a command switches the worker out: an off-CPU sample.
	since := bootNow(t)
	p.Do("spin 0 20")
	if !c.waitFor(10*time.Second, func() bool {
		for _, smp := range c.samples {
			if smp.TID == truth.TID && smp.OffCPU && smp.BootNs > since {
				return true
			}
		}
		return false
	}) {
		t.Fatal("no off-CPU sample after the worker parked")
	}
	for _, smp := range c.matching(truth.TID, since) {
		if smp.OffCPU && !bytes.Equal(smp.Record, want) {
			t.Fatalf("off-CPU record\n got %x\nwant %x", smp.Record, want)
		}
	}
}

// trackedCollector is a collector with one tracked publisher whose worker
// 0 published a record.
type trackedCollector struct {
	*collector
	p     *threadpub.Publisher
	truth threadpub.Truth
	want  []byte
}

func startSamplerTracking(t *testing.T, opts Options) (*Sampler, *trackedCollector) {
	t.Helper()
	s, c := startSampler(t, opts)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	rec := record(42)
	rec.Attrs[0] = "/a/rather/long/route/" + string(bytes.Repeat([]byte("x"), 100))
	truth := p.Set(0, rec)
	loc, err := tlsvar.Resolve("/proc", p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Track(p.PID, loc); err != nil {
		t.Fatal(err)
	}
	return s, &trackedCollector{c, p, truth, encode(rec)}
}

func TestReadCap(t *testing.T) {
	const readCap = 64
	_, c := startSamplerTracking(t, Options{ReadCap: readCap})
	spinUntil(t, c.p, 0, c.collector, "a sample", func() bool { return hasRecord(c.samples) })
	for _, smp := range c.matching(c.truth.TID, 0) {
		if !bytes.Equal(smp.Record, c.want[:readCap]) {
			t.Fatalf("capped record\n got %x\nwant %x", smp.Record, c.want[:readCap])
		}
		r, err := threadctx.Parse(smp.Record)
		if err != nil || !r.Truncated {
			t.Fatalf("capped record parses as %+v, %v: want Truncated", r, err)
		}
	}
}

func TestPrctlHook(t *testing.T) {
	_, c := startSampler(t, Options{})
	for _, libc := range testpub.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			var lat []time.Duration
			for i := 0; i < 5; i++ {
				// A publisher each time: the kernel sends two events of
				// one process per PrctlWindow (TestPrctlLimitedPerProcess).
				p := testpub.Start(t, libc)
				p.Set("service.name", "sampler-test")
				c.mu.Lock()
				c.prctl = nil
				c.mu.Unlock()
				start := time.Now()
				p.Publish() // prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, …) on every publish
				var at time.Time
				if !c.waitFor(10*time.Second, func() bool {
					for _, e := range c.prctl {
						if e.pid == p.PID {
							at = e.at
							return true
						}
					}
					return false
				}) {
					t.Fatalf("publish %d: prctl of pid %d not reported", i, p.PID)
				}
				lat = append(lat, at.Sub(start))
			}
			// From before the publish command (including its round trip
			// over the publisher's stdin/stdout) to the callback.
			t.Logf("prctl hook latency (publish command → onPrctl) for %d publishes: %v", len(lat), lat)
		})
	}
}

func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// fdSnapshot maps each open fd to what it refers to. The count alone
// cannot tell a leak: cilium/ebpf closes unreferenced objects from
// finalizers, so fds of earlier steps may go at any time.
func fdSnapshot(t *testing.T) map[string]string {
	t.Helper()
	runtime.GC() // let finalizers close what earlier steps dropped
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := make(map[string]string, len(ents))
	for _, e := range ents {
		// An fd closed since the listing (the listing's own) has no target.
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			fds[e.Name()] = target
		}
	}
	return fds
}

// checkNoNewFDs reports every fd open now that was not open, to the same
// object kind, in base.
func checkNoNewFDs(t *testing.T, base map[string]string, when string) {
	t.Helper()
	var leaked []string
	for fd, target := range fdSnapshot(t) {
		if base[fd] != target {
			leaked = append(leaked, fd+" -> "+target)
		}
	}
	if len(leaked) > 0 {
		sort.Strings(leaked)
		t.Errorf("%s: fds not open before: %v", when, leaked)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	// Warm up: the runtime's poller and cilium/ebpf's feature probes keep
	// fds of their own for the life of the process.
	s := newSampler(t, Options{OffCPU: true})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	base := fdSnapshot(t)

	s = newSampler(t, Options{OffCPU: true})
	var linkIDs []link.ID
	for _, l := range append(s.ticks.links, s.links...) {
		info, err := l.Info()
		if err != nil {
			t.Fatal(err)
		}
		linkIDs = append(linkIDs, info.ID)
	}
	var progIDs []ebpf.ProgramID
	for name, prog := range s.coll.Programs {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		progIDs = append(progIDs, id)
		insns, _ := info.VerifiedInstructions()
		t.Logf("program %s: id %d, %d instructions processed by the verifier", name, id, insns)
	}
	cpus, _ := cpulist.Online()
	if len(linkIDs) != len(cpus)+2 {
		t.Errorf("%d links, want one per CPU (%d) + sys_exit + sched_switch", len(linkIDs), len(cpus))
	}
	if fdCount(t) <= len(base) {
		t.Fatalf("no fds open while loaded?")
	}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(nil, nil) }()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	if err := s.Run(nil, nil); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	if err := s.Track(1, &tlsvar.Location{Arch: hostArch(), Placement: tlsvar.StaticTLS}); err == nil {
		t.Error("Track after Close succeeded")
	}
	if _, err := s.Stats(); err == nil {
		t.Error("Stats after Close succeeded")
	}
	checkNoNewFDs(t, base, "after Close")
	// The kernel frees links and programs once their last reference is
	// gone, which may lag the close by an RCU grace period: wait for it.
	gone := func() bool {
		for _, id := range linkIDs {
			if l, err := link.NewFromID(id); err == nil {
				l.Close()
				return false
			}
		}
		for _, id := range progIDs {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				p.Close()
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, fmt.Sprintf("links %v and programs %v gone after Close", linkIDs, progIDs), gone)
	goleak.VerifyNone(t, testenv.LongLived...)
}

func hostArch() tlsvar.Arch {
	if runtime.GOARCH == "arm64" {
		return tlsvar.ARM64
	}
	return tlsvar.AMD64
}

// otepVar is an OTEP 4947 variable at loc.
func otepVar(loc *tlsvar.Location) *schema.Variable {
	return &schema.Variable{Schema: &otep4947.Schema, Location: loc}
}

func TestOptionsAndRecipes(t *testing.T) {
	for _, o := range []Options{{ReadCap: 10}, {ReadCap: MaxReadCap + 1}, {RingBufferSize: 3 << 20}, {FrequencyHz: -1}} {
		if _, err := New(o); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("New(%+v): %v, want an options error", o, err)
		}
	}
	arch := hostArch()
	dyn := &tlsvar.Location{Arch: arch, Placement: tlsvar.DynamicTLS, ModuleID: 3, SymOffset: 8, DTVPointerOffset: 8,
		DTVEntrySize: 16, DTVCountOffset: -16, DTVUnallocated: ^uint64(0)}
	r, err := recipeFor(Target{PID: 7, StartTicks: 1234, Thread: otepVar(dyn)})
	if err != nil || r.Placement != placementDynamic || r.ModuleId != 3 || r.DtvCountOffset != -16 || r.DtvUnallocated != ^uint64(0) ||
		r.StartTicks != 1234 || r.DdCapacity != 0 {
		t.Errorf("recipeFor(dynamic) = %+v, %v", r, err)
	}
	dd := ddBuffer(0x7f0000001000, 64)
	r, err = recipeFor(Target{PID: 7, StartTicks: 99, Buffer: dd})
	if err != nil || r.Placement != 0 || r.DdAddr != dd.Addr || r.DdCapacity != 64 || r.StartTicks != 99 {
		t.Errorf("recipeFor(DD only) = %+v, %v", r, err)
	}
	r, err = recipeFor(Target{PID: 7, Thread: otepVar(dyn), Buffer: dd})
	if err != nil || r.Placement != placementDynamic || r.DdCapacity != 64 {
		t.Errorf("recipeFor(both) = %+v, %v", r, err)
	}
	for _, bad := range []*tlsvar.Location{
		nil,
		{Arch: arch},
		{Arch: arch, Placement: tlsvar.DynamicTLS, DTVEntrySize: 16},
		{Arch: arch ^ 3, Placement: tlsvar.StaticTLS},
	} {
		if _, err := recipeFor(Target{PID: 7, Thread: otepVar(bad)}); err == nil {
			t.Errorf("recipeFor(%+v) succeeded", bad)
		}
	}
	// What the kernel reads from the variable is its schema's.
	walk := &nodectx.Layout{TaggedSize: 8, JSMapTableOffset: 16, OrderedHashMapHeaderSize: 24, WrappedObjectOffset: 24, NativeWrapFieldsOffset: 40}
	r, err = recipeFor(Target{PID: 7, Thread: &schema.Variable{Schema: &nodejs.Schema, Location: dyn, Walk: walk}})
	if err != nil || r.Walk != walkNode || r.NodeTableOff != 16 || r.Placement != placementDynamic {
		t.Errorf("recipeFor(nodejs) = %+v, %v", r, err)
	}
	for _, bad := range []*schema.Variable{
		{Schema: &nodejs.Schema, Location: dyn}, // no walk
		{Schema: &ddring.Schema, Location: dyn}, // not read from a variable
		{Location: dyn},                         // no schema
		{Schema: mismatchedRecipe{schema.ReadNodeWalk, nil}, Location: dyn},
		{Schema: mismatchedRecipe{schema.ReadRecordPointer, walk}, Location: dyn},
		{Schema: mismatchedRecipe{schema.ReadDDSlot, nil}, Location: dyn},
	} {
		if _, err := recipeFor(Target{PID: 7, Thread: bad}); err == nil {
			t.Errorf("recipeFor(%+v) succeeded", bad)
		}
	}
	// A buffer is read as its schema says: an unknown schema, one not
	// read from a buffer, or a DD buffer the kernel cannot read is refused.
	for _, bad := range []*publisher.Buffer{
		ddBuffer(0x1000, 0), ddBuffer(0, 8), ddBuffer(0x1000, ddotel.MaxCapacity+1),
		{Schema: "nope", Addr: 0x1000, Capacity: 8},
		{Schema: otep4947.Schema.Name(), Addr: 0x1000, Capacity: 8},
	} {
		if _, err := recipeFor(Target{PID: 7, Buffer: bad}); err == nil {
			t.Errorf("recipeFor(buffer %+v) succeeded", bad)
		}
	}

	// Time namespace offsets (/proc/self/timens_offsets).
	dir := t.TempDir()
	for _, tc := range []struct {
		text string
		want int64
	}{
		{"monotonic 0 0\nboottime 5 7\n", 5e9 + 7},
		{"monotonic 3 0\n", 0},
		{"1 0 0\n7 -2 500\n", -2e9 + 500},
	} {
		f := filepath.Join(dir, "offsets")
		if err := os.WriteFile(f, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := timensBootOffset(f); err != nil || got != tc.want {
			t.Errorf("timensBootOffset(%q) = %d, %v; want %d", tc.text, got, err, tc.want)
		}
	}
	if got, err := timensBootOffset(filepath.Join(dir, "missing")); err != nil || got != 0 {
		t.Errorf("timensBootOffset(missing) = %d, %v", got, err)
	}
}

// TestUnprivilegedIsUnavailable: without privileges the kernel refuses,
// and New says so with ErrUnavailable (and the reason) so that callers
// fall back to ptrace.
func TestUnprivilegedIsUnavailable(t *testing.T) {
	testenv.RequireRoot(t)
	// A copy of this test binary that user nobody can execute (the build
	// directory is private to root).
	dir, exe := copyTestBinary(t)
	cmd := exec.Command(exe)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), unprivEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged New: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	t.Logf("as uid 65534: %s", got)
	if !strings.HasPrefix(got, "unavailable=true ") {
		t.Fatalf("as uid 65534: %q, want an ErrUnavailable", got)
	}
}

// TestRefusals: each kernel counter of refused reads is counted once,
// under a reason, for a read a registered schema has.
func TestRefusals(t *testing.T) {
	seen := map[Refusal]bool{}
	counters := map[int]bool{}
	for _, r := range refusals {
		if seen[r.Refusal] || counters[r.counter] || r.Reason == "" {
			t.Errorf("refusal %+v: twice or without a reason", r)
		}
		seen[r.Refusal], counters[r.counter] = true, true
		read := false
		for _, s := range registry.All {
			read = read || s.SamplerRead() == r.Read
		}
		if !read {
			t.Errorf("refusal %+v: no registered schema is read so", r)
		}
	}
}

// mismatchedRecipe is a schema whose recipe's read and walk disagree: the
// sampler must refuse it rather than let the kernel read one layout as
// another.
type mismatchedRecipe struct {
	read schema.SamplerRead
	walk *nodectx.Layout
}

func (mismatchedRecipe) Name() string                      { return "mismatched" }
func (mismatchedRecipe) Source() string                    { return publisher.SourceOTEP4947 }
func (m mismatchedRecipe) SamplerRead() schema.SamplerRead { return m.read }
func (mismatchedRecipe) Versions() []string                { return []string{"mismatched_v1"} }
func (mismatchedRecipe) Symbol() string                    { return tlsvar.SymbolName }
func (mismatchedRecipe) Walk(processctx.ThreadLocal, *tlsvar.Location) (*nodectx.Layout, error) {
	return nil, nil
}
func (mismatchedRecipe) Check(schema.Variable) error { return nil }
func (m mismatchedRecipe) ThreadRecipe(schema.Variable) (schema.SamplerRecipe, error) {
	return schema.SamplerRecipe{Read: m.read, Walk: m.walk}, nil
}
