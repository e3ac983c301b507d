// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
)

// The environment of the environment-named process, and what its samples'
// resource must carry.
const (
	envService    = "otelctx-envspin"
	envAttributes = "service.namespace=e2e,deployment.environment.name=env%20test"
)

var envWant = map[string]string{"service.name": envService, "service.namespace": "e2e", "deployment.environment.name": "env test"}

// The Node.js services: one traced by the OpenTelemetry SDK for Node
// (testdata/node/otelsvc.js, no process context; the SDK's resource from
// the same variables), one traced by dd-trace (testdata/node/e2e.js, its
// resource published) with other values of the variables in its
// environment, which must not replace its published service.name.
const (
	otelSvcService = "otelctx-otelsvc"
	ddEnvService   = "otelctx-env-not-published"
	ddService      = "otelctx-nodepub"
)

var otelSvcWant = map[string]string{"service.name": otelSvcService, "service.namespace": "e2e", "deployment.environment.name": "env test"}

// envResult: per process, its sample timestamps and how many carried the
// environment-named process's resource.
type envResult struct {
	hz, hogs, cpus int
	runFor, attach time.Duration
	named, bare    int // PIDs
	otelSvc, dd    int // PIDs of the Node.js services
	byPID          map[int64]*envCount
}

type envCount struct {
	samples  int
	full     int    // service.name, service.namespace and deployment.environment.name as the environment sets them
	any      int    // any of those three values
	nodeFull int    // the same for the OTel SDK service's environment
	nodeAny  int    // any of its three values
	service  string // the service.name of its last sample ("" none)
	ddEnv    int    // service.name as the dd-trace service's environment says (not as it publishes)
	ddPub    int    // service.name as the dd-trace service publishes
}

// measureEnviron: a C process (test/enrich/testdata/envspin.c, CPU-bound,
// no process context) named only by OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, the same program without them, and the CPU
// hogs, sampled by the real profiler through the distribution's defaults
// for -run: the named one must get its service and attributes on
// >= 99.9 % of its samples, no other process on any.
// The publisher kind it is called with is not used: the mode runs its own
// Node 24 services (nodeServices) whatever -publishers says.
func measureEnviron(ctx context.Context, cfg *config, hz int, _ kind, dir string) (_ *envResult, err error) {
	var k kind
	ps := &procs{}
	defer ps.stopAll()
	exe := filepath.Join(dir, "envspin")
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	cc := os.Getenv("PUBLISHER_CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.CommandContext(ctx, cc, "-O2", "-Wall", "-o", exe, filepath.Join(root, "test", "enrich", "testdata", "envspin.c")).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building envspin: %v\n%s", err, out)
	}
	res := &envResult{hz: hz, hogs: cfg.hogsPerCore * runtime.NumCPU(), cpus: runtime.NumCPU(), runFor: cfg.runFor, byPID: map[int64]*envCount{}}
	for i, env := range [][]string{
		{"PATH=/usr/bin:/bin", "OTEL_SERVICE_NAME=" + envService, "OTEL_RESOURCE_ATTRIBUTES=" + envAttributes},
		{"PATH=/usr/bin:/bin"},
	} {
		cmd := exec.Command(exe)
		cmd.Env = env
		p, err := ps.start(fmt.Sprintf("envspin %d", i), cmd)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			res.named = p.cmd.Process.Pid
		} else {
			res.bare = p.cmd.Process.Pid
		}
	}
	if k, res.otelSvc, err = nodeServices(ctx, ps, root, dir); err != nil {
		return nil, err
	}
	profPath := filepath.Join(dir, "profiles.jsonl")
	h, err := startHost(ctx, ps, cfg, hz, k, dir, distrun.Config{Profiles: &distrun.Profiles{GRPC: otlpEndpoint, Path: profPath}}.YAML())
	if err != nil {
		return nil, err
	}
	res.dd = h.pub.pid
	// Its first worker busy in 10 ms spans for longer than the window.
	if _, err := h.pub.do(ctx, 10*time.Second, "switch 0 %d 10 %s", int((cfg.runFor+5*time.Minute)/(10*time.Millisecond)), filepath.Join(dir, "truth-dd")); err != nil {
		return nil, err
	}
	h.logf("envspin %d (named by its environment), %d (no OTEL_ variables); Node.js: OTel SDK %d, dd-trace %d", res.named, res.bare, res.otelSvc, res.dd)
	var times result
	prof, err := startProfiler(ctx, ps, cfg, hz, dir, &times, h.logf)
	if err != nil {
		return nil, err
	}
	res.attach = times.profAttach.Sub(times.profStart)
	// The measurement window: the profiler samples the host for -run.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.runFor):
	}
	end := time.Now()
	out := &output{path: profPath, pid: -2}
	if err := waitFor(ctx, "the profiles covering the window", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, _, _, maxEnd, _ := out.snapshot()
		return maxEnd >= end.UnixNano(), err
	}, h.col, prof); err != nil {
		return nil, err
	}
	prof.stop(10 * time.Second)
	h.col.stop(30 * time.Second)
	return res, res.count(profPath)
}

// count tallies the sample timestamps of every process in the enriched
// profiles, and those whose resource carries the environment's values.
func (r *envResult) count(profPath string) error {
	var um pprofile.JSONUnmarshaler
	return eachLine(profPath, func(line []byte) error {
		pd, err := um.UnmarshalProfiles(line)
		if err != nil {
			return err
		}
		for _, rp := range pd.ResourceProfiles().All() {
			ra := rp.Resource().Attributes()
			pid := int64(-1)
			if v, ok := ra.Get("process.pid"); ok {
				pid = v.Int()
			}
			full, any := true, false
			for key, want := range envWant {
				v, ok := ra.Get(key)
				match := ok && v.AsString() == want
				full = full && match
				any = any || match
			}
			nodeFull, nodeAny := true, false
			for key, want := range otelSvcWant {
				v, ok := ra.Get(key)
				match := ok && v.AsString() == want
				nodeFull = nodeFull && match
				nodeAny = nodeAny || match
			}
			svc := ""
			if v, ok := ra.Get("service.name"); ok {
				svc = v.AsString()
			}
			n := 0
			for _, sp := range rp.ScopeProfiles().All() {
				for _, p := range sp.Profiles().All() {
					for _, s := range p.Samples().All() {
						n += max(1, s.TimestampsUnixNano().Len())
					}
				}
			}
			c := r.byPID[pid]
			if c == nil {
				c = &envCount{}
				r.byPID[pid] = c
			}
			c.samples += n
			c.service = svc
			if full {
				c.full += n
			}
			if any {
				c.any += n
			}
			if nodeFull {
				c.nodeFull += n
			}
			if nodeAny {
				c.nodeAny += n
			}
			switch svc {
			case ddEnvService:
				c.ddEnv += n
			case ddService:
				c.ddPub += n
			}
		}
		return nil
	})
}

// others: the processes other than the two named ones, their samples, and
// those with either named process's values or the dd-trace service's
// environment's service.name. (The two named ones share their
// service.namespace and deployment.environment.name: each is judged by
// its full set.)
func (r *envResult) others() (procs, samples, named int) {
	for pid, c := range r.byPID {
		if pid == int64(r.named) || pid == int64(r.otelSvc) {
			continue
		}
		procs++
		samples += c.samples
		named += c.any + c.nodeAny + c.ddEnv
	}
	return
}

func (r *envResult) of(pid int) *envCount {
	if c := r.byPID[int64(pid)]; c != nil {
		return c
	}
	return &envCount{}
}

func (r *envResult) goalMet() bool {
	c, n, d := r.of(r.named), r.of(r.otelSvc), r.of(r.dd)
	_, _, named := r.others()
	return c.samples > 0 && float64(c.full) >= 0.999*float64(c.samples) &&
		n.samples > 0 && float64(n.nodeFull) >= 0.999*float64(n.samples) &&
		d.samples > 0 && float64(d.ddPub) >= 0.999*float64(d.samples) && named == 0
}

func (r *envResult) print(label string) {
	fmt.Printf("\n== environ: %d Hz (%s)\n", r.hz, label)
	fmt.Printf("%d CPU hogs on %d CPUs; window %s; the profiler attached %.1f s after its start\n", r.hogs, r.cpus, r.runFor, r.attach.Seconds())
	c := r.byPID[int64(r.named)]
	if c == nil {
		c = &envCount{}
	}
	fmt.Printf("named by its environment (pid %d): %d sample timestamps, %d (%s) with %s, %s and %s\n", r.named, c.samples, c.full, pct(c.full, c.samples),
		"service.name="+envService, "service.namespace=e2e", "deployment.environment.name=env test")
	if b := r.byPID[int64(r.bare)]; b != nil {
		fmt.Printf("the same program without OTEL_ variables (pid %d): %d sample timestamps, %d with any of them, service.name %q\n", r.bare, b.samples, b.any, b.service)
	}
	n := r.of(r.otelSvc)
	fmt.Printf("Node.js with the OTel SDK named by its environment (pid %d): %d sample timestamps, %d (%s) with %s, %s and %s\n", r.otelSvc, n.samples, n.nodeFull, pct(n.nodeFull, n.samples),
		"service.name="+otelSvcService, "service.namespace=e2e", "deployment.environment.name=env test")
	d := r.of(r.dd)
	fmt.Printf("Node.js traced by dd-trace, %s in its environment (pid %d): %d sample timestamps, %d (%s) with its published service.name %s, %d with its environment's\n",
		"OTEL_SERVICE_NAME="+ddEnvService, r.dd, d.samples, d.ddPub, pct(d.ddPub, d.samples), ddService, d.ddEnv)
	procs, samples, named := r.others()
	fmt.Printf("every other process (%d, the hogs, the collector, ...): %d sample timestamps, %d with any of the named processes' values or the dd-trace service's environment's name\n", procs, samples, named)
	svcs := map[string]bool{}
	withSvc := 0
	for pid, c := range r.byPID {
		if pid != int64(r.named) && c.service != "" {
			withSvc++
			svcs[c.service] = true
		}
	}
	fmt.Printf("other processes with a service.name of their own (publishers on this host): %d, %d names\n", withSvc, len(svcs))
	verdict := "met"
	if !r.goalMet() {
		verdict = "MISSED"
	}
	fmt.Printf("goal (>= 99.9 %% of each named process's samples carry its resource, no other process's; >= 99.9 %% of the dd-trace service's its published service.name): %s\n", verdict)
}

// startOTelSvc starts otelsvc.js (Node k.node, the SDK make node-deps
// installed) with only OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES of
// the OTel variables, and checks the SDK made its resource from them.
func startOTelSvc(ctx context.Context, ps *procs, k kind, root, dir string) (int, error) {
	modules := filepath.Join(root, "_build", "node", "otelsdk", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@opentelemetry", "sdk-trace")); err != nil {
		return 0, fmt.Errorf("the OpenTelemetry SDK for Node: %v (make node-deps installs it)", err)
	}
	cmd := exec.Command(k.node, filepath.Join(root, "testdata", "node", "otelsvc.js"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "NODE_PATH=" + modules, "OTEL_SERVICE_NAME=" + otelSvcService, "OTEL_RESOURCE_ATTRIBUTES=" + envAttributes}
	pub, err := startPublisher(ps, cmd, filepath.Join(dir, "otelsvc.log"))
	if err != nil {
		return 0, fmt.Errorf("otelsvc.js: %w", err)
	}
	var resource map[string]any
	if err := json.Unmarshal([]byte(strings.Join(pub.ready, " ")), &resource); err != nil {
		return 0, fmt.Errorf("otelsvc.js: its resource %q: %w", pub.ready, err)
	}
	for key, want := range otelSvcWant {
		if resource[key] != want {
			return 0, fmt.Errorf("otelsvc.js: the SDK's resource has %s=%v, want %q", key, resource[key], want)
		}
	}
	return pub.pid, nil
}

// nodeServices starts the OTel SDK's Node.js service and returns the kind
// that starts dd-trace's as the host's publisher (startHost: the collector
// finds it before the profiler starts).
func nodeServices(ctx context.Context, ps *procs, root, dir string) (kind, int, error) {
	nk, err := nodeKind(root, "24")
	if err != nil {
		return kind{}, 0, err
	}
	otelSvc, err := startOTelSvc(ctx, ps, nk, root, dir)
	if err != nil {
		return kind{}, 0, err
	}
	k := nk
	k.name = "environ"
	k.start = func(ps *procs, logPath string) (*publisher, error) {
		cmd := exec.Command(nk.node, filepath.Join(root, "testdata", "node", "e2e.js"))
		cmd.Env = append(nk.nodeEnv(), "OTEL_SERVICE_NAME="+ddEnvService, "OTEL_RESOURCE_ATTRIBUTES=service.namespace=not-published")
		return startPublisher(ps, cmd, logPath)
	}
	return k, otelSvc, nil
}
