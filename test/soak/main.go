// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command soak runs the otelctx distribution for an hour (make soak; as
// root) the way a node runs it, and samples its memory and CPU every minute:
//
//   - the agent: the built distribution with the production configuration
//     (config/otelctx-production.yaml, its defaults), its gateway a second
//     instance of the distribution that prints one line per batch;
//   - publishers that churn: new process-context publishers every second,
//     each living -churn-life (scalepub churn, test/scale), and -demos thread
//     publishers (threadpub --demo) of which one is replaced every
//     -demo-life / -demos, so processes, threads and their histories come
//     and go all the time;
//   - a profiler: the stand-in profiler (internal/testutil/fakeprof) at
//     -hz on every CPU, named as the OTel eBPF profiler's program so the
//     agent follows it, whose samples (every process on the host) are sent
//     every second as OTLP profiles shaped like the profiler's through
//     ctxenrich to the gateway.
//
// Every -every it appends a row to -out (tab-separated, a header first):
// the agent's RSS, peak RSS, Go heap, CPU over the interval, open fds, the
// catalog's sizes by kind and the counts that say the pipeline works
// (followed samples, enriched samples, entity events). At the end it prints
// the bound: the RSS after -warmup against the RSS at the end of the
// warm-up, and the slope of a least-squares line through the rows after it;
// it exits 1 when the RSS grew by more than -max-growth after the warm-up.
// Every process it started is killed when it returns, fails or is
// interrupted.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
)

type options struct {
	dist, agentConfig, cc     string
	scalepubSrc, threadpubDir string
	out                       string
	duration, every, warmup   time.Duration
	hz                        int
	churnRate                 int
	churnLife                 time.Duration
	demos                     int
	demoLife                  time.Duration
	maxGrowth                 float64
	gomemlimit                string
}

func main() {
	var o options
	flag.StringVar(&o.dist, "dist", "_build/dist/otelcol-otelctx", "the distribution binary (make build)")
	flag.StringVar(&o.agentConfig, "config", "config/otelctx-production.yaml", "the agent's configuration (ports are overridden)")
	flag.StringVar(&o.cc, "cc", "gcc", "C compiler for the publishers")
	flag.StringVar(&o.scalepubSrc, "scalepub-src", "test/scale/testdata/scalepub.c", "the churning publisher's source")
	flag.StringVar(&o.threadpubDir, "threadpub-dir", "testdata/publishers", "threadpub.c, otelctx_tls.c and procctx.h")
	flag.StringVar(&o.out, "out", "_build/soak/soak.tsv", "the rows, one per -every")
	flag.DurationVar(&o.duration, "duration", time.Hour, "how long to run")
	flag.DurationVar(&o.every, "every", time.Minute, "sampling interval")
	flag.DurationVar(&o.warmup, "warmup", 15*time.Minute, "rows before this are the warm-up")
	flag.IntVar(&o.hz, "hz", 997, "the stand-in profiler's frequency, per CPU")
	flag.IntVar(&o.churnRate, "churn-rate", 5, "new process-context publishers per second")
	flag.DurationVar(&o.churnLife, "churn-life", 30*time.Second, "life of each")
	flag.IntVar(&o.demos, "demos", 3, "thread publishers (threadpub --demo) running at once")
	flag.DurationVar(&o.demoLife, "demo-life", 3*time.Minute, "life of each thread publisher")
	flag.Float64Var(&o.maxGrowth, "max-growth", 0.10, "largest RSS growth after the warm-up (fraction of the RSS at its end)")
	flag.StringVar(&o.gomemlimit, "gomemlimit", "200MiB", "the agent's GOMEMLIMIT (the DaemonSet's and the unit's)")
	flag.Parse()
	os.Exit(run(o))
}

// soak holds what a run started, to undo it on every path.
type soak struct {
	opt  options
	dir  string
	stop chan struct{}
	once sync.Once

	mu    sync.Mutex
	procs []*proc

	sent, sendErrors atomic.Int64
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func run(o options) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: run as root (eBPF, process_vm_readv of other processes)")
		return 2
	}
	if _, err := os.Stat(o.dist); err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v (make build first)\n", err)
		return 2
	}
	s := &soak{opt: o, stop: make(chan struct{})}
	defer s.cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	go func() {
		if v, ok := <-sig; ok {
			fmt.Fprintf(os.Stderr, "soak: %v, stopping\n", v)
			s.interrupt()
		}
	}()
	if err := s.run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	return 0
}

func (s *soak) run() error {
	o := s.opt
	dir, err := os.MkdirTemp("", "otelctx-soak-")
	if err != nil {
		return err
	}
	s.dir = dir
	scalepub := filepath.Join(dir, "scalepub")
	if err := s.compile(scalepub, "-O2", "-Wall", "-pthread", o.scalepubSrc); err != nil {
		return err
	}
	threadpub := filepath.Join(dir, "threadpub")
	if err := s.compile(threadpub, "-O2", "-Wall", "-pthread", "-rdynamic", "-mtls-dialect=gnu2",
		filepath.Join(o.threadpubDir, "threadpub.c"), filepath.Join(o.threadpubDir, "otelctx_tls.c")); err != nil {
		return err
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	gwGRPC, agentGRPC, agentHTTP, agentMetrics, agentHealth := ports[0], ports[1], ports[2], ports[3], ports[4]

	gw, err := s.startDist("gateway", nil, "--config", s.write("gateway.yaml", fmt.Sprintf(gatewayConfig, gwGRPC)),
		"--feature-gates=service.profilesSupport")
	if err != nil {
		return err
	}
	if err := s.waitFor(time.Minute, "the gateway's OTLP port", func() bool {
		select {
		case <-gw.done:
			return false
		default:
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", gwGRPC))
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		return err
	}
	overlay := s.write("agent-overlay.yaml", fmt.Sprintf(agentOverlay, agentGRPC, agentHTTP, agentHealth, agentMetrics))
	// As the DaemonSet runs it: GOMEMLIMIT under a 256 MiB limit.
	env := []string{fmt.Sprintf("OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:%d", gwGRPC), "GOMEMLIMIT=" + o.gomemlimit}
	agent, err := s.startDist("agent", env, "--config", o.agentConfig, "--config", overlay,
		"--feature-gates=service.profilesSupport")
	if err != nil {
		return err
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", agentMetrics)
	if err := s.waitFor(2*time.Minute, "the agent's metrics", func() bool { _, err := scrape(metricsURL); return err == nil }); err != nil {
		return err
	}

	if _, err := s.start("churn", nil, nil, scalepub, "churn", strconv.Itoa(o.churnRate), strconv.Itoa(int(o.churnLife.Seconds()))); err != nil {
		return err
	}
	demos := make([]*proc, 0, o.demos)
	for range o.demos {
		p, err := s.start("demo", nil, nil, threadpub, "--demo", "--demo-threads", "2", "--demo-busy", "20")
		if err != nil {
			return err
		}
		demos = append(demos, p)
	}
	// The OTel eBPF profiler's program name: the agent follows it by default.
	prof, err := fakeprof.Start(o.hz, "native_tracer_entry")
	if err != nil {
		return err
	}
	defer prof.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer s.interrupt()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sendLoop(prof, fmt.Sprintf("http://127.0.0.1:%d/v1development/profiles", agentHTTP))
	}()
	wg.Add(1)
	go func() { defer wg.Done(); s.replaceDemos(demos, threadpub) }()

	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	out, err := os.Create(o.out)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "# soak: %s, %v, profiler %d Hz per CPU, %d new publishers/s living %v, %d thread publishers living %v; started %s\n",
		o.dist, o.duration, o.hz, o.churnRate, o.churnLife, o.demos, o.demoLife, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintln(out, strings.Join(columns, "\t"))
	fmt.Fprintf(os.Stderr, "soak: agent pid %d, rows in %s, logs in %s\n", agent.cmd.Process.Pid, o.out, dir)

	start := time.Now()
	t0, c0, err := cpuTicks(agent.cmd.Process.Pid)
	if err != nil {
		return err
	}
	var rows []row
	for end := start.Add(o.duration); time.Now().Before(end); {
		if err := s.pause(o.every); err != nil {
			return err
		}
		select {
		case <-agent.done:
			return fmt.Errorf("the agent exited (log in %s)", dir)
		default:
		}
		r, err := s.sample(agent.cmd.Process.Pid, metricsURL, &t0, &c0)
		if err != nil {
			return err
		}
		r.minute = time.Since(start).Minutes()
		rows = append(rows, r)
		fmt.Fprintln(out, r.tsv())
		fmt.Fprintln(os.Stderr, "soak:", r.tsv())
	}
	verdict, ok := bound(rows, o.warmup.Minutes(), o.maxGrowth)
	fmt.Fprintln(out, "# "+verdict)
	fmt.Println(verdict)
	if !ok {
		return errors.New("the RSS grew after the warm-up")
	}
	return nil
}

// gatewayConfig: the agent's gateway, one line per batch received.
const gatewayConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [debug]
    profiles:
      receivers: [otlp]
      exporters: [debug]
`

// agentOverlay moves the production configuration's ports to free ones
// and adds an OTLP/HTTP endpoint for the stand-in profiler's profiles.
const agentOverlay = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
extensions:
  health_check:
    endpoint: 127.0.0.1:%d
# memory_limiter as in a pod limited to 256 MiB (80 %% and 20 %% of it):
# this process has no cgroup limit to take percentages of.
processors:
  memory_limiter:
    limit_percentage: 0
    spike_limit_percentage: 0
    limit_mib: 204
    spike_limit_mib: 51
service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
`

func (s *soak) write(name, text string) string {
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		panic(err) // the temporary directory was just made
	}
	return p
}

func (s *soak) compile(out string, args ...string) error {
	b, err := exec.Command(s.opt.cc, append([]string{"-o", out}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("compiling %s: %v\n%s", out, err, b)
	}
	return nil
}

func (s *soak) startDist(name string, env []string, args ...string) (*proc, error) {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	return s.start(name, log, env, s.opt.dist, args...)
}

// start runs a process in its own process group (killed with it), its
// output to log (nil: discarded).
func (s *soak) start(name string, log io.Writer, env []string, path string, args ...string) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return nil, errInterrupted
	default:
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.procs = append(s.procs, p)
	return p, nil
}

var errInterrupted = errors.New("interrupted")

func (s *soak) interrupt() { s.once.Do(func() { close(s.stop) }) }

func (s *soak) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.stop:
		return errInterrupted
	}
}

func (s *soak) waitFor(limit time.Duration, what string, cond func() bool) error {
	for end := time.Now().Add(limit); !cond(); {
		if time.Now().After(end) {
			return fmt.Errorf("%s: not there after %v (logs in %s)", what, limit, s.dir)
		}
		if err := s.pause(200 * time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// kill ends p's process group: SIGTERM first for the collectors, then
// SIGKILL, and waits for p.
func (s *soak) kill(p *proc) {
	pgid := p.cmd.Process.Pid
	if p.name == "agent" || p.name == "gateway" {
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "soak: %s did not stop on SIGTERM in 15 s, killing it\n", p.name)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

func (s *soak) cleanup() {
	s.interrupt()
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	// The agent first: its gateway must outlive it to take its last batch.
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].name == "agent" && procs[j].name != "agent" })
	for _, p := range procs {
		s.kill(p)
	}
	if s.dir != "" {
		fmt.Fprintf(os.Stderr, "soak: logs and configurations in %s\n", s.dir)
	}
}

// replaceDemos replaces the oldest thread publisher every demoLife/demos.
func (s *soak) replaceDemos(demos []*proc, threadpub string) {
	step := s.opt.demoLife / time.Duration(max(len(demos), 1))
	for i := 0; ; i = (i + 1) % len(demos) {
		if s.pause(step) != nil {
			return
		}
		old := demos[i]
		s.mu.Lock()
		for k, p := range s.procs {
			if p == old {
				s.procs = append(s.procs[:k], s.procs[k+1:]...)
				break
			}
		}
		s.mu.Unlock()
		s.kill(old)
		p, err := s.start("demo", nil, nil, threadpub, "--demo", "--demo-threads", "2", "--demo-busy", "20")
		if err != nil {
			return
		}
		demos[i] = p
	}
}

// sendLoop sends the profiler's samples of the last second as one OTLP
// profile per process, shaped like the OTel eBPF profiler's
// (docs/profiles.md): process.pid on the resource, thread.id and a
// timestamp on each sample.
func (s *soak) sendLoop(prof *fakeprof.Profiler, url string) {
	cl := &http.Client{Timeout: 10 * time.Second}
	period := int64(time.Second) / int64(s.opt.hz)
	for s.pause(time.Second) == nil {
		samples := prof.Take()
		if len(samples) == 0 {
			continue
		}
		body, err := profilesOf(samples, period)
		if err == nil {
			var resp *http.Response
			resp, err = cl.Post(url, "application/x-protobuf", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
		}
		if err != nil {
			s.sendErrors.Add(1)
			continue
		}
		s.sent.Add(int64(len(samples)))
	}
}

func profilesOf(samples []fakeprof.Sample, period int64) ([]byte, error) {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	strs := dict.StringTable()
	strs.Append("", "thread.id", "samples", "count", "cpu", "nanoseconds")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	attrOf := map[int]int32{}
	byPID := map[int]pprofile.Profile{}
	for _, smp := range samples {
		prof, ok := byPID[smp.PID]
		if !ok {
			rp := pd.ResourceProfiles().AppendEmpty()
			rp.Resource().Attributes().PutInt("process.pid", int64(smp.PID))
			prof = rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
			prof.SampleType().SetTypeStrindex(2)
			prof.SampleType().SetUnitStrindex(3)
			prof.PeriodType().SetTypeStrindex(4)
			prof.PeriodType().SetUnitStrindex(5)
			prof.SetPeriod(period)
			prof.SetTime(pcommon.NewTimestampFromTime(smp.Time))
			byPID[smp.PID] = prof
		}
		idx, ok := attrOf[smp.TID]
		if !ok {
			a := dict.AttributeTable().AppendEmpty()
			a.SetKeyStrindex(1)
			a.Value().SetInt(int64(smp.TID))
			idx = int32(dict.AttributeTable().Len() - 1)
			attrOf[smp.TID] = idx
		}
		ps := prof.Samples().AppendEmpty()
		ps.AttributeIndices().Append(idx)
		ps.TimestampsUnixNano().Append(uint64(smp.Time.UnixNano()))
	}
	var m pprofile.ProtoMarshaler
	return m.MarshalProfiles(pd)
}

// row is one sample of the agent.
type row struct {
	minute                  float64
	rss, hwm, heap          float64 // MiB
	cpu                     float64 // % of one core over the interval
	fds                     int
	processes, retained     float64 // the catalog, by kind
	threads, runs           float64
	contexts                float64
	followed, enriched      float64 // counters
	unmatched, entityEvents float64
	sent, sendErrors        int64
}

var columns = []string{"minute", "rss_mib", "hwm_mib", "heap_mib", "cpu_pct", "fds",
	"catalog_processes", "catalog_retained", "catalog_threads", "catalog_runs", "contexts",
	"samples_followed", "samples_enriched", "samples_unmatched", "entity_events", "samples_sent", "send_errors"}

func (r row) tsv() string {
	return fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%d",
		r.minute, r.rss, r.hwm, r.heap, r.cpu, r.fds, r.processes, r.retained, r.threads, r.runs, r.contexts,
		r.followed, r.enriched, r.unmatched, r.entityEvents, r.sent, r.sendErrors)
}

func (s *soak) sample(pid int, metricsURL string, t0 *time.Time, c0 *uint64) (row, error) {
	var r row
	t1, c1, err := cpuTicks(pid)
	if err != nil {
		return r, err
	}
	r.cpu = 100 * float64(c1-*c0) / 100 / t1.Sub(*t0).Seconds() // USER_HZ is 100
	*t0, *c0 = t1, c1
	if r.rss, err = statusMiB(pid, "VmRSS"); err != nil {
		return r, err
	}
	if r.hwm, err = statusMiB(pid, "VmHWM"); err != nil {
		return r, err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, err
	}
	r.fds = len(ents)
	m, err := scrape(metricsURL)
	if err != nil {
		// A busy host can hold a scrape past its timeout: the row keeps its
		// /proc figures and says -1 for the collector's own.
		fmt.Fprintf(os.Stderr, "soak: scraping %s: %v (row without the collector's metrics)\n", metricsURL, err)
		r.heap, r.processes, r.retained, r.threads, r.runs, r.contexts = -1, -1, -1, -1, -1, -1
		r.followed, r.enriched, r.unmatched, r.entityEvents = -1, -1, -1, -1
		r.sent, r.sendErrors = s.sent.Load(), s.sendErrors.Load()
		return r, nil
	}
	r.heap = m.sum("otelcol_process_runtime_heap_alloc_bytes", "") / (1 << 20)
	r.processes = m.sum("otelcol_processctx_catalog_used", `kind="processes"`)
	r.retained = m.sum("otelcol_processctx_catalog_used", `kind="retained_processes"`)
	r.threads = m.sum("otelcol_processctx_catalog_used", `kind="threads"`)
	r.runs = m.sum("otelcol_processctx_catalog_used", `kind="runs"`)
	r.contexts = m.sum("otelcol_processctx_contexts", "")
	r.followed = m.sum("otelcol_processctx_thread_samples_followed", "")
	r.enriched = m.sum("otelcol_ctxenrich_samples_enriched", "")
	r.unmatched = m.sum("otelcol_ctxenrich_samples_unmatched", "")
	r.entityEvents = m.sum("otelcol_processctx_entity_events", "")
	r.sent, r.sendErrors = s.sent.Load(), s.sendErrors.Load()
	return r, nil
}

// metrics is the collector's Prometheus text: series (name{labels}) to value.
type metrics map[string]float64

func scrape(url string) (metrics, error) {
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// sum adds the series of a metric (with or without the _total suffix of
// a counter) whose labels contain label.
func (m metrics) sum(name, label string) float64 {
	var v float64
	for series, x := range m {
		n, labels, _ := strings.Cut(series, "{")
		if (n == name || n == name+"_total") && strings.Contains(labels, label) {
			v += x
		}
	}
	return v
}

// bound compares the rows after the warm-up with the RSS at its end.
func bound(rows []row, warmup, maxGrowth float64) (string, bool) {
	var base *row
	var after []row
	for i := range rows {
		if rows[i].minute <= warmup {
			base = &rows[i]
		} else {
			after = append(after, rows[i])
		}
	}
	if base == nil || len(after) < 2 {
		return fmt.Sprintf("soak: %d rows, too few after a %.0f-minute warm-up for a bound", len(rows), warmup), true
	}
	var maxRSS, maxHeap, sumCPU float64
	for _, r := range after {
		maxRSS, maxHeap = max(maxRSS, r.rss), max(maxHeap, r.heap)
		sumCPU += r.cpu
	}
	growth := (maxRSS - base.rss) / base.rss
	ok := growth <= maxGrowth
	return fmt.Sprintf("soak: after the %.0f-minute warm-up (%d rows): RSS %.1f MiB at its end, at most %.1f MiB after (%+.1f %%, bound %+.0f %%), slope %+.2f MiB/h; heap at most %.1f MiB, slope %+.2f MiB/h; CPU mean %.2f %% of a core; peak RSS %.1f MiB; %s",
		warmup, len(after), base.rss, maxRSS, 100*growth, 100*maxGrowth, slope(after, func(r row) float64 { return r.rss }),
		maxHeap, slope(after, func(r row) float64 { return r.heap }), sumCPU/float64(len(after)), rows[len(rows)-1].hwm,
		map[bool]string{true: "within the bound", false: "OVER THE BOUND"}[ok]), ok
}

// slope is the least-squares slope of f over the rows, per hour.
func slope(rows []row, f func(row) float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, r := range rows {
		x, y := r.minute/60, f(r)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

func cpuTicks(pid int) (time.Time, uint64, error) {
	now := time.Now()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return now, 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return now, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return now, 0, fmt.Errorf("/proc/%d/stat: utime/stime", pid)
	}
	return now, ut + st, nil
}

func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// freePorts returns n loopback ports free now (held together, so distinct).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
