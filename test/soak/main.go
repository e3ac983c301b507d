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
//     ctx_enrich to the gateway.
//
// Every -every it appends a row to -out (tab-separated, a header first):
// the agent's RSS, peak RSS, Go heap, CPU over the interval, open fds, the
// catalog's sizes by kind and the counts that say the pipeline works
// (followed samples, enriched samples, entity events). At the end it prints
// the bound: the mean RSS of the last quarter of the rows after -warmup
// against the RSS at the end of the warm-up (and the maximum and the slope
// of a least-squares line through those rows); it exits 1 when that grew
// by more than -max-growth.
// Every process it started is killed when it returns, fails or is
// interrupted.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
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

// startProcesses compiles the publishers and starts the gateway, the agent
// (waiting for its metrics), the churn and the thread publishers.
func (s *soak) startProcesses() (agent *proc, metricsURL, profilesURL, threadpub string, demos []*proc, err error) {
	o := s.opt
	dir, err := os.MkdirTemp("", "otelctx-soak-")
	if err != nil {
		return nil, "", "", "", nil, err
	}
	s.dir = dir
	scalepub := filepath.Join(dir, "scalepub")
	if err := s.compile(scalepub, "-O2", "-Wall", "-pthread", o.scalepubSrc); err != nil {
		return nil, "", "", "", nil, err
	}
	threadpub = filepath.Join(dir, "threadpub")
	if err := s.compile(threadpub, "-O2", "-Wall", "-pthread", "-rdynamic", "-mtls-dialect=gnu2",
		filepath.Join(o.threadpubDir, "threadpub.c"), filepath.Join(o.threadpubDir, "otelctx_tls.c")); err != nil {
		return nil, "", "", "", nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, "", "", "", nil, err
	}
	gwGRPC, agentGRPC, agentHTTP, agentMetrics, agentHealth := ports[0], ports[1], ports[2], ports[3], ports[4]

	gw, err := s.startDist("gateway", nil, "--config", s.write("gateway.yaml", fmt.Sprintf(gatewayConfig, gwGRPC)),
		distrun.ProfilesGate)
	if err != nil {
		return nil, "", "", "", nil, err
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
		return nil, "", "", "", nil, err
	}
	overlay := s.write("agent-overlay.yaml", fmt.Sprintf(agentOverlay, agentGRPC, agentHTTP, agentHealth, agentMetrics))
	// As the DaemonSet runs it: GOMEMLIMIT under a 256 MiB limit.
	env := []string{fmt.Sprintf("OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:%d", gwGRPC), "GOMEMLIMIT=" + o.gomemlimit}
	agent, err = s.startDist("agent", env, "--config", o.agentConfig, "--config", overlay, distrun.ProductionGates)
	if err != nil {
		return nil, "", "", "", nil, err
	}
	metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", agentMetrics)
	if err := s.waitFor(2*time.Minute, "the agent's metrics", func() bool { _, err := scrape(metricsURL); return err == nil }); err != nil {
		return nil, "", "", "", nil, err
	}

	if _, err := s.start("churn", nil, nil, scalepub, "churn", strconv.Itoa(o.churnRate), strconv.Itoa(int(o.churnLife.Seconds()))); err != nil {
		return nil, "", "", "", nil, err
	}
	demos = make([]*proc, 0, o.demos)
	for range o.demos {
		p, err := s.start("demo", nil, nil, threadpub, "--demo", "--demo-threads", "2", "--demo-busy", "20")
		if err != nil {
			return nil, "", "", "", nil, err
		}
		demos = append(demos, p)
	}
	return agent, metricsURL, fmt.Sprintf("http://127.0.0.1:%d/v1development/profiles", agentHTTP), threadpub, demos, nil
}

func (s *soak) run() error {
	o := s.opt
	agent, metricsURL, profilesURL, threadpub, demos, err := s.startProcesses()
	if err != nil {
		return err
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
		s.sendLoop(prof, profilesURL)
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
	fmt.Fprintf(os.Stderr, "soak: agent pid %d, rows in %s, logs in %s\n", agent.cmd.Process.Pid, o.out, s.dir)

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
			return fmt.Errorf("the agent exited (log in %s)", s.dir)
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
