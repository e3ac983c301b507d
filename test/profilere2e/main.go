// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command profilere2e measures the distribution end to end with the real
// OpenTelemetry eBPF profiler: how many of the profiler's samples of a
// thread-context publisher ctxenrich links to the span their thread had
// when the sample was taken, and how many carry the publisher's
// service.name, including samples that arrive after the publisher exited.
// See README.md beside this file; `make e2e-profiler PROFILER_SRC=DIR`
// runs it. It is a program, not a test: `go test ./...` never runs it (the
// profiler is built outside this repository).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

const (
	serviceName   = "threadpub" // what threadpub.c publishes in its process context, unless THREADPUB_SERVICE says otherwise
	tracefs       = "/sys/kernel/tracing"
	attachLogLine = "Attached tracer program"
	// entityLogLine: the debug exporter's line for the processctx
	// receiver's entity events (basic verbosity).
	entityLogLine = `"log records"`
)

// otlpEndpoint is where the collector takes the profiler's OTLP (-otlp).
var otlpEndpoint = "127.0.0.1:4317"

type config struct {
	dist, profiler, label string
	hz                    []int
	hogsPerCore, workers  int
	shortMS, longMS       int
	runFor                time.Duration
	reporterInterval      time.Duration
	startFor              time.Duration
	firstPhase            time.Duration
	keep, goal            bool
	profilerArgs          []string
	mode                  string
	agentsNice            int
	rounds                int // cputime mode: rounds of threadpub.RouteMix per worker (0: mixRounds's default)
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-hog" {
		hog()
	}
	os.Exit(mainRC())
}

// hog is one CPU-bound process of the busy host.
func hog() {
	runtime.GOMAXPROCS(1)
	var x uint64
	for {
		x++
	}
}

func mainRC() int {
	var cfg config
	var hz, profArgs, pubs string
	flag.StringVar(&cfg.dist, "dist", "_build/dist/otelcol-otelctx", "the distribution's binary (make build)")
	flag.StringVar(&cfg.profiler, "profiler", "", "the OTel eBPF profiler: its binary, or the directory it was built in (PROFILER_SRC)")
	flag.StringVar(&hz, "hz", "20", "profiler frequencies (-samples-per-second), comma or space separated: one full measurement each")
	flag.IntVar(&cfg.hogsPerCore, "hogs-per-core", 1, "CPU-bound busy-loop processes per CPU (the busy host; 1: every CPU busy, the agents at nice 0 still get their share: README.md, Hogs)")
	flag.IntVar(&cfg.workers, "workers", 2, "publisher threads switching spans concurrently")
	flag.IntVar(&cfg.shortMS, "short-ms", 10, "span length of the first run (ms)")
	flag.IntVar(&cfg.longMS, "long-ms", 50, "span length of the second run (ms)")
	flag.DurationVar(&cfg.runFor, "run", 30*time.Second, "nominal duration of each run: spans = run / span length (on a busy host a span lasts until its thread runs again after its end, so runs take longer)")
	flag.DurationVar(&cfg.reporterInterval, "reporter-interval", 5*time.Second, "the profiler's -reporter-interval")
	flag.DurationVar(&cfg.startFor, "start", 20*time.Second, "how much longer than -run the first run lasts: the profiler starts with it and loads, attaches and reports meanwhile")
	flag.DurationVar(&cfg.firstPhase, "first", 10*time.Second, "the first samples, reported apart: from the profiler's first sample of the publisher")
	flag.StringVar(&pubs, "publishers", "threadpub", "the publishers measured, one full measurement each per frequency: threadpub (C, OTEP 4947 TLS pointer), node24 (Node.js 24 with dd-trace, nodejs_v1_dev; node22, node26 too)")
	flag.StringVar(&otlpEndpoint, "otlp", otlpEndpoint, "the collector's OTLP/gRPC endpoint, the profiler's -collection-agent (another port lets two measurements run at once)")
	flag.StringVar(&profArgs, "profiler-args", "", "extra profiler flags, space separated")
	flag.StringVar(&cfg.label, "label", "", "what is measured (default: the git commit of the working tree)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the temporary directory (config, logs, output, ground truth)")
	flag.StringVar(&cfg.mode, "mode", "links", "what is measured: links (each sample's span link and service), cputime (CPU time by route and by span through the cputime connector, threadpub only), environ (a C process named only by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES)")
	flag.IntVar(&cfg.agentsNice, "agents-nice", 0, "run the profiler and the collector at this nice value (e.g. -10: agents with CPU reserved ahead of the workload, the CPU hogs; 0: as they run)")
	flag.IntVar(&cfg.rounds, "rounds", 0, "cputime mode: rounds of the route mix (480 ms of CPU time, 5 spans) per worker (0: threadpub's fewest at which 2 % is three standard deviations of the smallest route's share at each -hz, 203 at 997 Hz: 20 s of CPU time for /login, what a 2 % share needs; a node kind's 20)")
	flag.BoolVar(&cfg.goal, "goal", true, "exit non-zero when the goal (>= 99% right and 0 wrong for every span length) is missed")
	flag.Parse()
	for _, f := range strings.FieldsFunc(hz, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "profilere2e: -hz: bad frequency %q\n", f)
			return 2
		}
		cfg.hz = append(cfg.hz, n)
	}
	cfg.profilerArgs = strings.Fields(profArgs)
	if cfg.mode != "links" && cfg.mode != "cputime" && cfg.mode != "environ" {
		fmt.Fprintf(os.Stderr, "profilere2e: -mode: %q, want links, cputime or environ\n", cfg.mode)
		return 2
	}
	if len(cfg.hz) == 0 || cfg.rounds < 0 || cfg.shortMS <= 0 || cfg.longMS <= 0 || cfg.workers <= 0 || cfg.hogsPerCore < 0 || cfg.startFor < 0 || cfg.firstPhase <= 0 {
		flag.Usage()
		return 2
	}
	if err := resolveProfiler(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
		return 2
	}
	if _, err := os.Stat(cfg.dist); err != nil {
		fmt.Fprintf(os.Stderr, "profilere2e: the distribution %s: %v (run make build)\n", cfg.dist, err)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "profilere2e: must run as root (the profiler loads BPF programs; the collector reads other processes)")
		return 2
	}
	if cfg.label == "" {
		cfg.label = gitLabel()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	base, err := os.MkdirTemp("", "profilere2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
		return 1
	}
	defer func() {
		if cfg.keep {
			fmt.Printf("profilere2e: kept %s\n", base)
		} else {
			os.RemoveAll(base)
		}
	}()
	pubExe := filepath.Join(base, "threadpub")
	if err := buildPublisher(ctx, pubExe); err != nil {
		fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
		return 1
	}

	ks, err := kinds(pubs, pubExe)
	if err != nil {
		fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
		return 2
	}
	switch cfg.mode {
	case "cputime":
		return measureAll(ctx, &cfg, base, ks, measureCPUTime)
	case "environ":
		return measureAll(ctx, &cfg, base, []kind{{name: "environ"}}, measureEnviron)
	}
	var results []*result
	rc := 0
	for _, k := range ks {
		for _, hz := range cfg.hz {
			dir := filepath.Join(base, fmt.Sprintf("%s-%dhz", k.name, hz))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
				return 1
			}
			res, err := measure(ctx, &cfg, hz, k, dir)
			if err != nil {
				fmt.Fprintf(os.Stderr, "profilere2e: %s, %d Hz: %v (logs in %s%s)\n", k.name, hz, err, dir, map[bool]string{true: "", false: ", removed: rerun with -keep"}[cfg.keep])
				if ctx.Err() != nil {
					return 130
				}
				rc = 1
				continue
			}
			res.print(os.Stdout, cfg.hogsPerCore*runtime.NumCPU(), runtime.NumCPU(), cfg.label)
			results = append(results, res)
			if cfg.goal && !res.goalMet() {
				rc = 1
			}
		}
	}
	if len(results) > 1 {
		fmt.Printf("\n== summary (%s)\n%-6s %-9s %-8s %-8s %-8s %-10s %-10s\n", cfg.label, "Hz", "samples", "right", "wrong", "unlinked", "svc.name", "after exit")
		for _, r := range results {
			row := func(what string, c counts) {
				fmt.Printf("%-6d %-9s %-8s %-8s %-8s %-10s %-10s\n", r.hz, what, pct(c.right, c.total()), pct(c.wrong, c.total()), pct(c.unlinked, c.total()),
					pct(r.svcAll[0], r.svcAll[1]), pct(r.svcAfter[0], r.svcAfter[1]))
			}
			for i, run := range r.runs {
				row(fmt.Sprintf("%s %d ms", r.service, run.ms), r.byRun[i])
			}
			row(fmt.Sprintf("first %s", r.firstPhase), r.byPhase[0])
			row("the rest", r.byPhase[1])
		}
	}
	if rc != 0 && cfg.goal {
		fmt.Println("profilere2e: goal missed or a measurement failed (-goal=false reports without failing)")
	}
	return rc
}

// goalResult is a measurement of the cputime and environ modes.
type goalResult interface {
	print(label string)
	goalMet() bool
}

// measureAll runs m once per publisher and frequency.
func measureAll[R goalResult](ctx context.Context, cfg *config, base string, ks []kind, m func(context.Context, *config, int, kind, string) (R, error)) int {
	rc := 0
	for _, k := range ks {
		for _, hz := range cfg.hz {
			dir := filepath.Join(base, fmt.Sprintf("%s-%s-%dhz", cfg.mode, k.name, hz))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				fmt.Fprintf(os.Stderr, "profilere2e: %v\n", err)
				return 1
			}
			res, err := m(ctx, cfg, hz, k, dir)
			if err != nil {
				fmt.Fprintf(os.Stderr, "profilere2e: %s, %s, %d Hz: %v (logs in %s%s)\n", cfg.mode, k.name, hz, err, dir, map[bool]string{true: "", false: ", removed: rerun with -keep"}[cfg.keep])
				if ctx.Err() != nil {
					return 130
				}
				rc = 1
				continue
			}
			res.print(cfg.label)
			if cfg.goal && !res.goalMet() {
				rc = 1
			}
		}
	}
	if rc != 0 && cfg.goal {
		fmt.Println("profilere2e: goal missed or a measurement failed (-goal=false reports without failing)")
	}
	return rc
}

// resolveProfiler accepts the profiler's binary or the directory it was
// built in.
func resolveProfiler(cfg *config) error {
	how := "build the OTel eBPF profiler outside this repository as test/profilere2e/README.md describes, then pass the directory it was built in: make e2e-profiler PROFILER_SRC=DIR"
	if cfg.profiler == "" {
		return errors.New("no profiler given: " + how)
	}
	st, err := os.Stat(cfg.profiler)
	if err != nil {
		return fmt.Errorf("profiler %s: %v: %s", cfg.profiler, err, how)
	}
	if st.IsDir() {
		bin := filepath.Join(cfg.profiler, "ebpf-profiler")
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("no profiler binary %s (go build in the profiler's checkout makes it): %s", bin, how)
		}
		cfg.profiler = bin
	}
	abs, err := filepath.Abs(cfg.profiler)
	if err != nil {
		return err
	}
	cfg.profiler = abs
	return nil
}

func gitLabel() string {
	out, err := exec.Command("git", "log", "-1", "--format=%h %s").Output()
	if err != nil {
		return "commit unknown"
	}
	label := "HEAD " + strings.TrimSpace(string(out))
	if len(label) > 90 {
		label = label[:90] + "..."
	}
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		label += " (+ uncommitted changes in the tree)"
	}
	return label
}

// buildPublisher compiles threadpub.c the way `make run` builds the demo
// publisher: the variable in the executable, exported, TLSDESC.
func buildPublisher(ctx context.Context, exe string) error {
	src := threadpub.SourceDir()
	cc := os.Getenv("PUBLISHER_CC")
	if cc == "" {
		cc = "gcc"
	}
	cmd := exec.CommandContext(ctx, cc, "-O2", "-Wall", "-g", "-pthread", "-rdynamic", "-mtls-dialect=gnu2", "-o", exe,
		filepath.Join(src, "threadpub.c"), filepath.Join(src, "otelctx_tls.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the publisher: %s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

func collectorConfig(dir string) string {
	return distrun.Config{
		Profiles: &distrun.Profiles{GRPC: otlpEndpoint, Path: filepath.Join(dir, "profiles.jsonl")},
	}.YAML()
}

// waitFor polls cond every `every` until it holds, the timeout passes, ctx
// ends, or one of the processes exits.
// errNotWithin: waitFor's condition did not hold in time (the other
// errors are a failed condition, an exited process, or the context).
var errNotWithin = errors.New("not within")

func waitFor(ctx context.Context, what string, timeout, every time.Duration, cond func() (bool, error), watch ...*proc) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		for _, p := range watch {
			if p.exited() {
				return fmt.Errorf("%s: %s exited (%v)", what, p.name, p.err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w %s", what, errNotWithin, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every): // polling pace
		}
	}
}

// host is what every measurement starts: the publisher, the CPU hogs and
// the collector, which has found the publisher.
type host struct {
	pub    *publisher
	col    *proc
	colLog string
	logf   func(format string, args ...any)
}

// startHost starts the publisher with its workers, the hogs and the
// collector (configuration colConfig), and waits until the collector has
// found the publisher (k.service "": no publisher, no wait).
func startHost(ctx context.Context, ps *procs, cfg *config, hz int, k kind, dir, colConfig string) (*host, error) {
	h := &host{logf: func(format string, args ...any) {
		fmt.Printf("profilere2e: %s, %d Hz: %s %s\n", k.name, hz, time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}}
	if l, err := net.Listen("tcp", otlpEndpoint); err != nil {
		return nil, fmt.Errorf("%s is taken (a collector from make run?): %w", otlpEndpoint, err)
	} else {
		l.Close()
	}

	// 1. The publisher and its workers.
	if k.start != nil {
		pub, err := k.start(ps, filepath.Join(dir, "publisher.log"))
		if err != nil {
			return nil, err
		}
		h.pub = pub
		if k.requests {
			h.logf("publisher pid %d", pub.pid)
		} else {
			if _, err := pub.do(ctx, 10*time.Second, "threads %d", cfg.workers); err != nil {
				return nil, err
			}
			h.logf("publisher pid %d, %d workers", pub.pid, cfg.workers)
		}
	}

	// 2. The busy host.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	hogs := cfg.hogsPerCore * runtime.NumCPU()
	for i := 0; i < hogs; i++ {
		if _, err := ps.start(fmt.Sprintf("hog %d", i), exec.Command(self, "-hog")); err != nil {
			return nil, err
		}
	}
	h.logf("%d CPU hogs", hogs)

	// 3. The distribution.
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(colConfig), 0o644); err != nil {
		return nil, err
	}
	h.colLog = filepath.Join(dir, "collector.log")
	colLog, err := os.Create(h.colLog)
	if err != nil {
		return nil, err
	}
	defer colLog.Close() // the child has its own descriptor
	colCmd := agentCommand(cfg, cfg.dist, "--config", cfgPath, distrun.ProfilesGate)
	colCmd.Stdout, colCmd.Stderr = colLog, colLog
	if h.col, err = ps.start("collector", colCmd); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "the collector's OTLP/gRPC endpoint "+otlpEndpoint, time.Minute, 100*time.Millisecond, func() (bool, error) {
		c, err := net.DialTimeout("tcp", otlpEndpoint, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	}, h.col); err != nil {
		return nil, err
	}
	h.logf("collector listening on %s", otlpEndpoint)

	// 4. The collector finds the publisher (its entity event in the logs
	// pipeline) before the profiler starts, as on a host where the
	// collector runs already.
	if h.pub != nil {
		if err := waitFor(ctx, "the collector's entity event of the publisher", 2*time.Minute, 200*time.Millisecond, func() (bool, error) {
			b, err := os.ReadFile(h.colLog)
			return strings.Contains(string(b), entityLogLine), err
		}, h.col); err != nil {
			return nil, err
		}
		h.logf("the collector found the publisher")
	}
	return h, nil
}

func measure(ctx context.Context, cfg *config, hz int, k kind, dir string) (_ *result, err error) {
	ps := &procs{}
	defer ps.stopAll()
	h, err := startHost(ctx, ps, cfg, hz, k, dir, collectorConfig(dir))
	if err != nil {
		return nil, err
	}
	pub, col, logf := h.pub, h.col, h.logf

	// 5. The measured runs: the first starts with the profiler, which
	// loads, attaches and reports while the workers switch spans; every
	// sample it takes of them is scored, the first included.
	res := &result{hz: hz, pid: pub.pid, service: k.service, firstPhase: cfg.firstPhase}
	out := &output{path: filepath.Join(dir, "profiles.jsonl"), pid: int64(pub.pid)}
	var prof *proc
	for i, spanMS := range []int{cfg.shortMS, cfg.longMS} {
		runFor := cfg.runFor
		if i == 0 {
			runFor += cfg.startFor
		}
		paths, err := startRun(ctx, pub, cfg.workers, int(runFor/(time.Duration(spanMS)*time.Millisecond)), spanMS, dir)
		if err != nil {
			return nil, err
		}
		logf("run: %d workers x %d spans of %d ms", cfg.workers, int(runFor/(time.Duration(spanMS)*time.Millisecond)), spanMS)
		if i == 0 {
			if prof, err = startProfiler(ctx, ps, cfg, hz, dir, res, logf); err != nil {
				return nil, err
			}
		}
		r, err := waitRun(ctx, pub, cfg, spanMS, paths)
		if err != nil {
			return nil, err
		}
		res.runs = append(res.runs, r)
		if err := out.poll(); err != nil {
			return nil, err
		}
	}
	exitAt, err := pub.exit(ctx)
	if err != nil {
		return nil, err
	}
	exitOff := out.fileSize()
	res.exitAt = exitAt
	logf("publisher exited; output at %d bytes", exitOff)

	// 6. Wait for the reports that cover the runs' end: two reporter
	// intervals' worth of profile time past the exit.
	want := exitAt.Add(cfg.reporterInterval + time.Second).UnixNano()
	if err := waitFor(ctx, "the profiles covering the publisher's exit", 4*cfg.reporterInterval+30*time.Second, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, _, _, maxEnd, _ := out.snapshot()
		return maxEnd >= want, err
	}, col, prof); err != nil {
		return nil, err
	}
	if err := out.poll(); err != nil {
		return nil, err
	}
	evs, lines, samples, _, _ := out.snapshot()
	logf("%d profile messages, %d sample timestamps, %d of the publisher", lines, samples, len(evs))
	csv, err := os.Create(filepath.Join(dir, "samples.csv"))
	if err != nil {
		return nil, err
	}
	defer csv.Close()
	score(res, evs, exitOff, csv)
	res.followLog = followLines(h.colLog)
	return res, nil
}

// followLines are the collector's log lines saying where thread contexts
// are read (one at start, one per change of what is followed).
func followLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, "thread contexts: "); i >= 0 {
			ts, _, _ := strings.Cut(l, "\t")
			msg := l[i:]
			if j := strings.Index(msg, "\t"); j >= 0 {
				msg = msg[:j]
			}
			lines = append(lines, ts+" "+msg)
		}
	}
	return lines
}

// startRun makes every worker switch n spans of spanMS ms; it returns the
// ground truth's path by TID.
func startRun(ctx context.Context, pub *publisher, workers, n, spanMS int, dir string) (map[int64]string, error) {
	paths := map[int64]string{}
	for k := 0; k < workers; k++ {
		path := filepath.Join(dir, fmt.Sprintf("truth-%dms-%d", spanMS, k))
		f, err := pub.do(ctx, 10*time.Second, "switch %d %d %d %s", k, n, spanMS, path)
		if err != nil {
			return nil, err
		}
		tid, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("switch reply %q", f)
		}
		paths[tid] = path
	}
	return paths, nil
}

// waitRun waits for the workers' runs and reads their ground truth.
func waitRun(ctx context.Context, pub *publisher, cfg *config, spanMS int, paths map[int64]string) (run, error) {
	r := run{ms: spanMS, truth: map[int64]threadpub.SwitchTruth{}}
	for k := 0; k < cfg.workers; k++ {
		if _, err := pub.do(ctx, 10*(cfg.runFor+cfg.startFor)+time.Minute, "wait %d", k); err != nil {
			return r, err
		}
	}
	for tid, path := range paths {
		tr, err := threadpub.ReadSwitchTruth(path)
		if err != nil {
			return r, err
		}
		r.truth[tid] = tr
	}
	return r, nil
}

// startProfiler starts the profiler (tracefs mounted first) and returns
// once it logged its attach; res gets the start and attach times.
func startProfiler(ctx context.Context, ps *procs, cfg *config, hz int, dir string, res *result, logf func(string, ...any)) (*proc, error) {
	if err := mountTracefs(); err != nil {
		return nil, err
	}
	profLog, err := os.Create(filepath.Join(dir, "profiler.log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"-collection-agent=" + otlpEndpoint, "-disable-tls",
		"-reporter-interval=" + cfg.reporterInterval.String(), "-samples-per-second=" + strconv.Itoa(hz)}, cfg.profilerArgs...)
	profCmd := agentCommand(cfg, cfg.profiler, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		profLog.Close()
		return nil, err
	}
	profCmd.Stdout, profCmd.Stderr = pw, pw
	res.profStart = time.Now()
	prof, err := ps.start("profiler", profCmd)
	pw.Close()
	if err != nil {
		pr.Close()
		profLog.Close()
		return nil, err
	}
	lw := newLineWatcher(attachLogLine)
	go func() { lw.copy(pr, profLog); pr.Close(); profLog.Close() }()
	if err := lw.wait(ctx, attachLogLine, 2*time.Minute, prof); err != nil {
		return nil, err
	}
	res.profAttach = time.Now()
	logf("profiler (pid %d) attached %.1f s after its start", prof.cmd.Process.Pid, res.profAttach.Sub(res.profStart).Seconds())
	return prof, nil
}

// agentCommand runs an agent (the profiler, the collector) at -agents-nice.
func agentCommand(cfg *config, bin string, args ...string) *exec.Cmd {
	if cfg.agentsNice == 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("nice", append([]string{"-n", strconv.Itoa(cfg.agentsNice), bin}, args...)...)
}

// mountTracefs mounts tracefs where the profiler looks for it.
func mountTracefs() error {
	var st unix.Statfs_t
	if err := unix.Statfs(tracefs, &st); err == nil && st.Type == unix.TRACEFS_MAGIC {
		return nil
	}
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("mount -t tracefs nodev %s: %w", tracefs, err)
	}
	return nil
}
