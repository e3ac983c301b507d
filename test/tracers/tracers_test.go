// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package tracers_test runs real services traced by dd-trace-py and the
// Datadog Java agent (make tracer-deps) and reads their process and thread
// contexts as otelctx list and otelctx threads do (ptrace, eBPF sampler),
// against the ground truth each service takes from its tracer's API.
package tracers_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/tracersvc"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(testenv.LongLived...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const localRootKey = "datadog.local_root_span_id"

// tracer is what differs between the two tracers' services.
type tracer struct {
	name string
	cmd  func(t *testing.T, service string) *exec.Cmd
	// instance: the form of service.instance.id (the tracer's runtime id).
	instance *regexp.Regexp
	// sdk: telemetry.sdk.name in the resource.
	sdk string
	// none: how a thread with no active span reads (Python frees the
	// record and clears the pointer; Java leaves its record with valid=0).
	none string
	// virtual: requests on virtual threads, whose carrier may change
	// before the service's truth is read: spans are matched by their ids
	// over the process's threads, not by TID.
	virtual bool
	// late: the service whose request threads start before the tracer's
	// module with the variable is loaded (nil: none).
	late func(t *testing.T, service string, n int) *exec.Cmd
	// model: how the module reaches its variable, as the tracer ships it.
	model tlsvar.Model
}

var (
	pythonTracer = tracer{
		name:     "python",
		cmd:      func(t *testing.T, service string) *exec.Cmd { return tracersvc.PythonCmd(t, service) },
		instance: regexp.MustCompile(`^[0-9a-f]{32}$`),
		sdk:      "libdatadog",
		none:     threadread.ReasonNullPointer,
		late: func(t *testing.T, service string, n int) *exec.Cmd {
			return tracersvc.PythonLateCmd(t, service, n)
		},
		// The manylinux wheel's PyO3 module, dlopen'ed at import.
		model: tlsvar.ModelTLSDESC,
	}
	uuid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

func javaTracer(mode string, minJDK int) tracer {
	return tracer{
		name: "java-" + mode,
		cmd: func(t *testing.T, service string) *exec.Cmd {
			return tracersvc.JavaCmd(t, tracersvc.JDK(t, minJDK), service, mode)
		},
		instance: uuid,
		sdk:      "dd-trace-java",
		none:     threadread.ReasonNotValid,
		virtual:  mode == "virtual",
		late: func(t *testing.T, service string, n int) *exec.Cmd {
			return tracersvc.JavaLateCmd(t, tracersvc.JDK(t, minJDK), service, n)
		},
		// libjavaProfiler.so, extracted to a temporary directory and
		// System.load'ed.
		model: tlsvar.ModelGeneralDynamic,
	}
}

func tracers() []tracer {
	// Virtual threads are final from JDK 21.
	return []tracer{pythonTracer, javaTracer("platform", 17), javaTracer("virtual", 21)}
}

// published waits for pid's process context, as otelctx list reads it.
func published(t *testing.T, pid int) *publisher.Process {
	t.Helper()
	s, err := scan.New(scan.Options{ProcRoot: "/proc"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var p *publisher.Process
	testenv.Eventually(t, fmt.Sprintf("the process context of %d", pid), func() bool {
		p, err = s.ReadPID(pid)
		return err == nil && p.MappingAddr != 0
	})
	return p
}

func resourceValue(c processctx.Context, key string) string {
	v, _ := processctx.Lookup(c.Resource.Attributes, key)
	return v.AsString()
}

// checkContext: otelctx list's columns (service, instance, schema) and the
// key map naming the local root span id.
func checkContext(t *testing.T, tr tracer, p *publisher.Process, service string) {
	t.Helper()
	c := p.Context
	if got := resourceValue(c, "service.name"); got != service {
		t.Errorf("service.name %q, want %q", got, service)
	}
	if got := resourceValue(c, "service.instance.id"); !tr.instance.MatchString(got) {
		t.Errorf("service.instance.id %q, want the form %v", got, tr.instance)
	}
	if got := resourceValue(c, "telemetry.sdk.name"); got != tr.sdk {
		t.Errorf("telemetry.sdk.name %q, want %q", got, tr.sdk)
	}
	if c.ThreadLocal.SchemaVersion != "tlsdesc_v1_dev" {
		t.Errorf("schema %q, want tlsdesc_v1_dev", c.ThreadLocal.SchemaVersion)
	}
	found := false
	for _, k := range c.ThreadLocal.AttributeKeyMap {
		found = found || k == localRootKey
	}
	if !found {
		t.Errorf("key map %q has no %s", c.ThreadLocal.AttributeKeyMap, localRootKey)
	}
}

// settled is a ptrace snapshot (otelctx threads) in which every thread
// stopped: a busy host can keep one from stopping in time.
func settled(t *testing.T, pid int, v schema.Variable, keyMap []string) []threadread.Thread {
	t.Helper()
	for attempt := 0; ; attempt++ {
		threads, st, err := threadread.Snapshot(pid, v, threadread.Options{KeyMap: keyMap, ProcRoot: "/proc"})
		if err != nil {
			t.Fatal(err)
		}
		if st.Reasons[threadread.ReasonTimeout] == 0 || attempt == 10 {
			return threads
		}
	}
}

func ids(trace, span string) string { return trace + "/" + span }

// checkSnapshot: each busy thread's record is its span with its local root;
// the idle thread has none, for the tracer's reason; no other thread has one.
func checkSnapshot(t *testing.T, tr tracer, threads []threadread.Thread, steps []tracersvc.Ready) {
	t.Helper()
	byTID := map[int]threadread.Thread{}
	read := map[string]threadread.Thread{}
	for _, th := range threads {
		byTID[th.TID] = th
		if th.Record != nil {
			k := ids(th.Record.TraceID.String(), th.Record.SpanID.String())
			if prev, dup := read[k]; dup {
				t.Errorf("span %s on threads %d and %d", k, prev.TID, th.TID)
			}
			read[k] = th
		} else if !threadread.NoContext(th.Reason) && th.Reason != threadread.ReasonExited {
			t.Errorf("thread %d: %s (%v)", th.TID, th.Reason, th.Err)
		}
	}
	want := 0
	for _, r := range steps {
		if r.TraceID == "" {
			th, ok := byTID[r.TID]
			switch {
			case !ok:
				t.Errorf("%s: idle thread %d not in the snapshot", r.Step, r.TID)
			case th.Record != nil:
				t.Errorf("%s: idle thread %d has span %s", r.Step, r.TID, th.Record.SpanID)
			case th.Reason != tr.none:
				t.Errorf("%s: idle thread %d: %q, want %q", r.Step, r.TID, th.Reason, tr.none)
			}
			continue
		}
		want++
		th, ok := read[ids(r.TraceID, r.SpanID)]
		if !ok {
			t.Errorf("%s: span %s %s (local root %s) read on no thread; thread %d: %+v", r.Step, r.TraceID, r.SpanID, r.LocalRoot, r.TID, byTID[r.TID])
			continue
		}
		if !tr.virtual && th.TID != r.TID {
			t.Errorf("%s: span %s read on thread %d, runs on %d", r.Step, r.SpanID, th.TID, r.TID)
		}
		if got := th.Attributes[localRootKey]; got != r.LocalRoot {
			t.Errorf("%s: %s %q, want %q (attributes %v)", r.Step, localRootKey, got, r.LocalRoot, th.Attributes)
		}
	}
	if len(read) != want {
		var got []string
		for k, th := range read {
			got = append(got, fmt.Sprintf("%d:%s", th.TID, k))
		}
		sort.Strings(got)
		t.Errorf("%d threads with a record, want %d: %v", len(read), want, got)
	}
}

// capture keeps the sampler's samples by TID.
type capture struct {
	mu   sync.Mutex
	byID map[int][]sampler.Sample
}

func (c *capture) add(s sampler.Sample) {
	c.mu.Lock()
	c.byID[s.TID] = append(c.byID[s.TID], s)
	c.mu.Unlock()
}

// marks are the number of samples of each thread now.
func (c *capture) marks() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[int]int, len(c.byID))
	for tid, s := range c.byID {
		m[tid] = len(s)
	}
	return m
}

// since: the samples of each thread after the marks.
func (c *capture) since(m map[int]int) map[int][]sampler.Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int][]sampler.Sample{}
	for tid, s := range c.byID {
		out[tid] = append([]sampler.Sample(nil), s[min(m[tid], len(s)):]...)
	}
	return out
}

// sampled: what one sample read ("" no record) and its local root.
func sampled(s sampler.Sample, keyMap []string) (span, localRoot string) {
	if s.Record == nil {
		return "", ""
	}
	rec, err := threadctx.Parse(s.Record)
	if err != nil {
		return "", ""
	}
	named, _ := rec.Named(keyMap)
	return ids(rec.TraceID.String(), rec.SpanID.String()), named[localRootKey]
}

// grace: a thread's first samples after the marks may predate its step.
const grace = 5

// checkSamples: over the step's samples (each busy thread spins in its
// innermost span), every sample of a busy thread shows its span and local
// root, the idle thread's show none, no other thread shows one; each busy
// thread has at least min samples.
func checkSamples(t *testing.T, tr tracer, got map[int][]sampler.Sample, steps []tracersvc.Ready, keyMap []string) (right, wrong int) {
	t.Helper()
	truth := map[string]tracersvc.Ready{}
	idle := map[int]bool{}
	for _, r := range steps {
		if r.TraceID == "" {
			idle[r.TID] = true
		} else {
			truth[ids(r.TraceID, r.SpanID)] = r
		}
	}
	seen := map[string]int{}
	for tid, samples := range got {
		if len(samples) > grace {
			samples = samples[grace:]
		} else {
			samples = nil
		}
		for _, s := range samples {
			span, lr := sampled(s, keyMap)
			if span == "" {
				continue
			}
			r, ok := truth[span]
			switch {
			case idle[tid]:
				t.Errorf("idle thread %d sampled with span %s", tid, span)
				wrong++
			case !ok:
				t.Errorf("thread %d sampled with span %s, of no step", tid, span)
				wrong++
			case !tr.virtual && r.TID != tid:
				t.Errorf("%s: span %s sampled on thread %d, runs on %d", r.Step, span, tid, r.TID)
				wrong++
			case lr != r.LocalRoot:
				t.Errorf("%s: sampled local root %q, want %q", r.Step, lr, r.LocalRoot)
				wrong++
			default:
				seen[span]++
				right++
			}
		}
	}
	for k, r := range truth {
		if seen[k] == 0 {
			t.Errorf("%s: span %s never sampled", r.Step, r.SpanID)
		}
	}
	return right, wrong
}

// TestServices: for each tracer, a service whose requests (a root span and
// 1 to 3 nested ones) spin on several threads at once beside a thread that
// ended its span: the process context names the service, and the thread
// contexts read by ptrace and sampled by eBPF are the tracer's own truth.
func TestServices(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tr := range tracers() {
		t.Run(tr.name, func(t *testing.T) { service(t, tr) })
	}
}

func service(t *testing.T, tr tracer) {
	name := "otelctx-test-" + tr.name
	exercise(t, tr, tracersvc.Start(t, tr.cmd(t, name)), name)
}

// TestLateLoad: the tracer's module (Python's native extension, Java's
// profiler library) is loaded while the service's request threads already
// run, and those threads serve every request: the variable is resolved in
// threads whose DTV predates the module (glibc, TLSDESC for the Python
// wheel, general dynamic for the Java library), read right by ptrace and
// eBPF as in TestServices.
func TestLateLoad(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tr := range []tracer{pythonTracer, javaTracer("platform", 17)} {
		t.Run(tr.name, func(t *testing.T) {
			name := "otelctx-test-late-" + tr.name
			svc := tracersvc.Start(t, tr.late(t, name, 64))
			if len(svc.Pool) != 64 {
				t.Fatalf("%d pool threads, want 64", len(svc.Pool))
			}
			exercise(t, tr, svc, name)
		})
	}
}

// exercise checks the service's process context, then runs two rounds of
// three concurrent spinning requests beside a thread with no span, each
// read by ptrace and sampled by eBPF against the service's truth.
func exercise(t *testing.T, tr tracer, svc *tracersvc.Service, name string) {
	t.Helper()
	p := published(t, svc.PID)
	checkContext(t, tr, p, name)
	tl := p.Context.ThreadLocal
	v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return tlsvar.Resolve("/proc", svc.PID) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: variable %s", tr.name, v.Location)
	if v.Location.Model != tr.model {
		t.Errorf("%s: the variable is reached by %s, want %s", tr.name, v.Location.Model, tr.model)
	}

	c := startSampler(t, svc.PID, v)
	ebpf := c != nil

	totalRight, totalWrong := 0, 0
	for round := 0; round < 2; round++ {
		// The idle thread first, its request answered (and so its span
		// ended) before the others start.
		if got := <-svc.Get(fmt.Sprintf("/idle?step=r%didle", round)); strings.TrimSpace(got) != "ok" {
			t.Fatalf("/idle answered %q", got)
		}
		steps := []tracersvc.Ready{svc.NextReady(t)}
		var answers []<-chan string
		for depth := 2; depth <= 4; depth++ {
			answers = append(answers, svc.Get(fmt.Sprintf("/work?step=r%dd%d&depth=%d", round, depth, depth)))
		}
		for range answers {
			r := svc.NextReady(t)
			if svc.Pool != nil && !svc.Pool[r.TID] {
				t.Errorf("%s: served by thread %d, not one of the pool started before the module", r.Step, r.TID)
			}
			steps = append(steps, r)
		}
		checkSnapshot(t, tr, settled(t, svc.PID, v, tl.AttributeKeyMap), steps)
		if ebpf {
			marks := c.marks()
			testenv.Eventually(t, fmt.Sprintf("round %d: 20 samples of each spinning thread", round), func() bool {
				got := c.since(marks)
				for _, r := range steps {
					if !tr.virtual && len(got[r.TID]) < 20+grace {
						return false
					}
				}
				if tr.virtual {
					// Carriers unknown: 20 samples showing each span.
					seen := map[string]int{}
					for _, samples := range got {
						for _, s := range samples[min(grace, len(samples)):] {
							span, _ := sampled(s, tl.AttributeKeyMap)
							seen[span]++
						}
					}
					for _, r := range steps {
						if r.TraceID != "" && seen[ids(r.TraceID, r.SpanID)] < 20 {
							return false
						}
					}
				}
				return true
			})
			right, wrong := checkSamples(t, tr, c.since(marks), steps, tl.AttributeKeyMap)
			totalRight += right
			totalWrong += wrong
		}
		for _, r := range steps {
			svc.Release(t, r.Step)
		}
		for _, a := range answers {
			if got := <-a; strings.TrimSpace(got) != "ok" {
				t.Errorf("answer %q", got)
			}
		}
	}
	if ebpf {
		t.Logf("%s: eBPF samples in spans: %d right, %d wrong", tr.name, totalRight, totalWrong)
	}
}

// samplerAvailable: the eBPF half runs where the sampler loads (always
// under CI=true, where samplertest.Require fails the test otherwise).
func samplerAvailable(t *testing.T) bool {
	t.Helper()
	if testenv.InCI() {
		samplertest.Require(t)
		return true
	}
	s, err := sampler.New(sampler.Options{})
	if err != nil {
		t.Logf("eBPF sampler unavailable, ptrace only: %v", err)
		return false
	}
	_ = s.Close()
	return true
}

// TestAsyncio: two asyncio tasks take turns on one thread, each in its own
// span (dd-trace-py with its asyncio integration): at each turn, ptrace
// and the eBPF sampler read the running task's span, not the other's.
func TestAsyncio(t *testing.T) {
	testenv.RequireRoot(t)
	tr := pythonTracer
	name := "otelctx-test-asyncio"
	svc := tracersvc.Start(t, tracersvc.PythonAsyncioCmd(t, name))
	p := published(t, svc.PID)
	checkContext(t, tr, p, name)
	tl := p.Context.ThreadLocal
	v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return tlsvar.Resolve("/proc", svc.PID) })
	if err != nil {
		t.Fatal(err)
	}
	c := startSampler(t, svc.PID, v)
	right, wrong := 0, 0
	for _, step := range []string{"a1", "b1", "a2", "b2"} {
		r := svc.NextReady(t)
		if r.Step != step || r.TID != svc.PID {
			t.Fatalf("step %s on thread %d, want %s on the main thread %d", r.Step, r.TID, step, svc.PID)
		}
		steps := []tracersvc.Ready{r}
		checkSnapshot(t, tr, settled(t, svc.PID, v, tl.AttributeKeyMap), steps)
		if c != nil {
			marks := c.marks()
			testenv.Eventually(t, step+": 20 samples of the spinning task", func() bool {
				return len(c.since(marks)[r.TID]) >= 20+grace
			})
			ri, wi := checkSamples(t, tr, c.since(marks), steps, tl.AttributeKeyMap)
			right, wrong = right+ri, wrong+wi
		}
		svc.Release(t, step)
	}
	if c != nil {
		t.Logf("asyncio: eBPF samples in spans: %d right, %d wrong", right, wrong)
	}
}

// startSampler runs the eBPF sampler on pid's variable until the test
// ends; nil where it cannot load (outside CI).
func startSampler(t *testing.T, pid int, v schema.Variable) *capture {
	t.Helper()
	if !samplerAvailable(t) {
		return nil
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{byID: map[int][]sampler.Sample{}}
	done := make(chan error, 1)
	go func() { done <- s.Run(c.add, nil) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TrackTarget(sampler.Target{PID: pid, StartTicks: ticks, Thread: &v}); err != nil {
		t.Fatal(err)
	}
	return c
}
