// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

func TestThreadSamplerConfigValidate(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(*Config)) Config { c := def; f(&c); return c }
	for _, tc := range []struct {
		sampler string
		tc      Config
		want    string // substring of the error; "" = valid
	}{
		{"auto", def, ""},
		{"follow", def, ""},
		{"ebpf", def, ""},
		{"follow", with(func(c *Config) { c.FollowPrograms = nil }), "thread_sampler: follow needs thread_context.follow_programs"},
		{"auto", with(func(c *Config) { c.FollowPrograms = []string{""} }), `thread_context.follow_programs[0]: "" is not a BPF program name`},
		{"ptrace", with(func(c *Config) { c.Interval, c.ReadCap = time.Second, 28 }), ""},
		{"off", def, ""},
		{"sometimes", def, `thread_sampler must be "auto", "follow", "ebpf", "ptrace" or "off", got "sometimes"`},
		{"auto", with(func(c *Config) { c.Mode = "ptrace" }), "thread_context.mode is replaced by thread_sampler (auto, follow, ebpf, ptrace or off): write thread_sampler: ptrace"},
		{"ptrace", with(func(c *Config) { c.Interval = time.Millisecond }), "thread_context.interval must be at least 100ms"},
		{"ptrace", with(func(c *Config) { c.ReadCap = 27 }), "thread_context.read_cap must be in [28, 65563], got 27"},
		// The eBPF sampler reads at most 1024 bytes: more is refused, not silently cut.
		{"ptrace", with(func(c *Config) { c.ReadCap = 65563 }), ""},
		{"auto", with(func(c *Config) { c.ReadCap = 1024 }), ""},
		{"auto", with(func(c *Config) { c.ReadCap = 1025 }), "thread_context.read_cap must be at most 1024 with thread_sampler: auto"},
		{"follow", with(func(c *Config) { c.ReadCap = 4096 }), "thread_context.read_cap must be at most 1024 with thread_sampler: follow"},
		{"ebpf", with(func(c *Config) { c.ReadCap = 4096 }), "thread_context.read_cap must be at most 1024 with thread_sampler: ebpf"},
		{"ebpf", with(func(c *Config) { c.FrequencyHz = 0 }), "thread_context.frequency_hz must be in [1, 10000], got 0"},
		{"ebpf", with(func(c *Config) { c.FrequencyHz = 20000 }), "thread_context.frequency_hz must be in [1, 10000], got 20000"},
	} {
		err := errors.Join(Validate(tc.sampler, tc.tc)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: %v", tc.sampler, tc.tc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: got %v, want %q", tc.sampler, tc.tc, err, tc.want)
		}
	}
	if def.Interval != 30*time.Second || def.ReadCap != 640 || def.FrequencyHz != 97 || def.OffCPU {
		t.Errorf("defaults %+v", def)
	}
}

// detachedPub is a thread publisher that is not a child of the test
// process: a process both parent and tracer of another gets that child's
// ptrace-stops in its own waits (os/exec's Wait would take them for an
// exit). A collector is never its targets' parent either. sh is the parent.
type detachedPub struct {
	t     *testing.T
	pid   int
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startDetachedPub(t *testing.T, cell threadpub.Cell) *detachedPub {
	t.Helper()
	testenv.RequireRoot(t)
	exe, args := threadpub.Build(t, cell)
	// An asynchronous command's stdin is /dev/null unless redirected: keep
	// the pipe on fd 3 and hand it over explicitly. (wait's stderr is
	// dropped: sh would report the cleanup's SIGKILL as "Killed".)
	cmd := exec.Command("sh", append([]string{"-c", `exec 3<&0; "$@" <&3 3<&- & wait $! 2>/dev/null`, "sh", exe}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &detachedPub{t: t, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		if p.pid > 0 {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	f := p.line()
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("greeting %q", f)
	}
	p.pid, _ = strconv.Atoi(f[1])
	return p
}

// line reads one answer; the publisher answers at once and its exit ends
// the scan.
func (p *detachedPub) line() []string {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatal("publisher: no answer")
	}
	return strings.Fields(p.out.Text())
}

func (p *detachedPub) do(format string, args ...any) []string {
	p.t.Helper()
	fmt.Fprintf(p.stdin, format+"\n", args...)
	f := p.line()
	if len(f) == 0 || f[0] != "ok" {
		p.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), f)
	}
	return f[1:]
}

func TestThreadContextPtraceMode(t *testing.T) {
	pub := startDetachedPub(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	pub.do("threads 2")
	a, _ := strconv.Atoi(pub.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/checkout 1=POST 2=u-42")[0])
	idle, _ := strconv.Atoi(pub.do("info 1")[0])

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(pub.pid)
	cfg.ThreadSampler = SamplerPtrace
	cfg.ThreadContext.Interval = 100 * time.Millisecond
	_, _, cat := startSource(t, cfg, tel)

	eventually(t, "the thread record in the catalog", func() bool { _, _, ok := cat.Thread(pub.pid, a); return ok })
	rec, seen, _ := cat.Thread(pub.pid, a)
	if rec.Record.TraceID.String() != "0af7651916cd43dd8448eb211c80319c" || rec.Record.SpanID.String() != "b7ad6b7169203331" ||
		rec.Record.TraceFlags != 1 || seen.IsZero() {
		t.Fatalf("record %+v seen %v", rec, seen)
	}
	if fmt.Sprint(rec.Attributes) != "map[http.request.method:POST http.route:/checkout user.id:u-42]" {
		t.Fatalf("attributes %v", rec.Attributes)
	}
	if _, _, ok := cat.Thread(pub.pid, idle); ok {
		t.Error("a thread without a record is in the catalog")
	}

	// A new record replaces the old one; a cleared thread leaves the catalog.
	pub.do("set 0 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 0 1=GET")
	eventually(t, "the updated record", func() bool {
		r, _, ok := cat.Thread(pub.pid, a)
		return ok && r.Record.SpanID.String() == "00f067aa0ba902b7" && r.Attributes["http.request.method"] == "GET"
	})
	pub.do("clear 0")
	eventually(t, "the cleared thread to leave the catalog", func() bool { _, _, ok := cat.Thread(pub.pid, a); return !ok })

	for _, name := range []string{"otelcol_processctx_thread_snapshots", "otelcol_processctx_threads_read"} {
		if telemetrytest.Sum(tel, name, "", "") == 0 {
			t.Errorf("%s not recorded", name)
		}
	}
	m, err := tel.GetMetric("otelcol_processctx_thread_stop_duration")
	if err != nil {
		t.Fatal(err)
	}
	h := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
	if max, ok := h.Max.Value(); h.Count == 0 || !ok || max > 1 {
		t.Errorf("stop durations: count %d, max %v s", h.Count, max)
	}
	if telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", "") != 0 {
		t.Errorf("unexpected failures: %d", telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", ""))
	}

	// The process exits: its threads leave the catalog with it.
	_ = syscall.Kill(pub.pid, syscall.SIGKILL)
	eventually(t, "the catalog to forget the process", func() bool {
		_, ok := cat.Process(pub.pid)
		return !ok && len(cat.Threads(pub.pid)) == 0
	})
}

// A record that uses a key index the catalog's key map does not know yet
// (the publisher appended a key since the last poll) makes the reader
// re-read the process context at its mapping once, and the name resolves.
func TestThreadContextKeyMapRefresh(t *testing.T) {
	pub := startDetachedPub(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	pub.do("threads 1")
	cfg := fastConfig(pub.pid)
	// Only the first round polls: the catalog keeps the key map it saw then.
	cfg.Interval = time.Hour
	cfg.ThreadSampler = SamplerPtrace
	cfg.ThreadContext.Interval = 50 * time.Millisecond
	_, _, cat := startSource(t, cfg, nil)
	eventually(t, "the process in the catalog", func() bool { _, ok := cat.Process(pub.pid); return ok })
	if p, _ := cat.Process(pub.pid); len(p.Context.ThreadLocal.AttributeKeyMap) != 3 {
		t.Fatalf("key map %v, want the publisher's 3 keys", p.Context.ThreadLocal.AttributeKeyMap)
	}

	pub.do("keymap http.route,http.request.method,user.id,tenant.id")
	tid, _ := strconv.Atoi(pub.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/t 3=acme")[0])
	eventually(t, "tenant.id resolved through the refreshed key map", func() bool {
		r, _, ok := cat.Thread(pub.pid, tid)
		return ok && r.Attributes["tenant.id"] == "acme" && r.Attributes["http.route"] == "/t"
	})
}

// A publisher whose process context has a TLS schema but whose module does
// not export the variable is counted as "no symbol", and nothing is stopped.
func TestThreadContextNoSymbolCounted(t *testing.T) {
	pub := startDetachedPub(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC, Variant: threadpub.NotTLS})
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(pub.pid)
	cfg.ThreadSampler = SamplerPtrace
	cfg.ThreadContext.Interval = 100 * time.Millisecond
	startSource(t, cfg, tel)
	eventually(t, "a resolution failure counted", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", "no symbol")+
			telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", "unsupported") > 0
	})
	if telemetrytest.Sum(tel, "otelcol_processctx_thread_snapshots", "reason", "") != 0 {
		t.Error("threads were stopped without a resolved variable")
	}
}

// injectSamplerFailure makes sampler.New fail as on a kernel without BPF
// for the rest of the test (tests using it do not run in parallel).
func injectSamplerFailure(t *testing.T) {
	prev := newSampler
	newSampler = func(sampler.Options) (*sampler.Sampler, error) {
		return nil, fmt.Errorf("%w: injected: BPF_PROG_LOAD: operation not permitted", sampler.ErrUnavailable)
	}
	t.Cleanup(func() { newSampler = prev })
}

// The choice is logged once at Info when the source is made, with why.
func TestThreadSamplerLogged(t *testing.T) {
	for _, tc := range []struct {
		sampler string
		want    string
	}{
		{SamplerOff, "thread contexts: off (thread_sampler: off)"},
		{SamplerPtrace, "thread contexts: ptrace every 30s (thread_sampler: ptrace)"},
	} {
		cfg := fastConfig(1 << 22) // a PID that cannot exist: nothing is read
		cfg.ThreadSampler = tc.sampler
		logs, err := startLogged(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := threadLines(logs); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: log lines %q, want [%q]", tc.sampler, got, tc.want)
		}
	}
}

// auto without a loadable sampler is off, with one warning saying why and
// that ptrace is opt-in: it never stops threads unasked. ebpf and follow
// refuse to start.
func TestThreadSamplerFallback(t *testing.T) {
	injectSamplerFailure(t)
	cfg := fastConfig(1 << 22)
	cfg.ThreadSampler = SamplerAuto
	logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := threadLines(logs)
	if len(got) != 1 || !strings.HasPrefix(got[0], "thread contexts: off: the kernel refused the eBPF sampler: eBPF sampler unavailable: injected") ||
		!strings.Contains(got[0], "thread_sampler: ptrace reads thread contexts by stopping every thread") {
		t.Errorf("auto: log lines %q", got)
	}
	if e := logs.FilterMessageSnippet("thread contexts: ").All(); len(e) != 1 || e[0].Level != zapcore.WarnLevel {
		t.Errorf("auto: not one warning: %v", e)
	}
	for _, choice := range []string{SamplerEBPF, SamplerFollow} {
		cfg.ThreadSampler = choice
		if _, err := startLogged(t, cfg); err == nil || !strings.Contains(err.Error(), "thread_sampler: "+choice+": eBPF sampler unavailable: injected") {
			t.Errorf("%s without a sampler: Start error %v", choice, err)
		}
	}
}

// auto on this machine, whatever it has: one line saying where thread
// contexts are read (a profiler's samples if one runs, own ticks else).
func TestThreadSamplerAutoHere(t *testing.T) {
	cfg := fastConfig(1 << 22)
	cfg.ThreadSampler = SamplerAuto
	logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := threadLines(logs)
	if len(got) == 0 || !(strings.HasPrefix(got[0], "thread contexts: no profiler program to follow running; own ticks at 97 Hz (thread_sampler: auto)") ||
		strings.HasPrefix(got[0], "thread contexts: eBPF at the samples of native_tracer_entry") ||
		strings.HasPrefix(got[0], "thread contexts: off: the kernel refused the eBPF sampler")) {
		t.Fatalf("log lines %q", got)
	}
	t.Log(got[0])
}

// TestThreadSnapshotPIDReused: the catalog still holds a process identity
// whose PID now belongs to another process (it learns of exits only at its
// next poll). A snapshot then reads the successor: its records must not be
// written under the old identity.
func TestThreadSnapshotPIDReused(t *testing.T) {
	pub := startDetachedPub(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	pub.do("threads 1")
	a, _ := strconv.Atoi(pub.do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=/checkout")[0])

	s, err := scan.New(scan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	p, err := s.ReadPID(pub.pid)
	if err != nil {
		t.Fatal(err)
	}
	tel, ttel := readerTelemetry(t)
	tr := &Ptrace{
		log: zap.NewNop(), cfg: DefaultConfig(), catalog: catalog.New(),
		cache: threadread.NewCache(""), tel: ttel, now: time.Now, logged: map[publisher.ProcessID]bool{},
	}

	// The right identity: the record is written.
	tr.catalog.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	tr.snapshot(context.Background(), p, true)
	if _, _, ok := tr.catalog.Thread(pub.pid, a); !ok {
		t.Fatal("the record of the process read is not in the catalog")
	}

	// A predecessor's identity (same PID, earlier start): dropped, counted.
	old := *p
	old.ID.StartTicks--
	tr.catalog.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}, {Kind: publisher.Found, Process: &old}})
	tr.snapshot(context.Background(), &old, true)
	if n := len(tr.catalog.Threads(pub.pid)); n != 0 {
		t.Fatalf("%d threads written under the predecessor's identity", n)
	}
	if n := telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", reasonPIDReused); n != 1 {
		t.Errorf("pid reused failures = %d, want 1", n)
	}
}
