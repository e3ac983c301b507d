// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// envResult: per process, its sample timestamps and how many carried the
// environment-named process's resource.
type envResult struct {
	hz, hogs, cpus int
	runFor, attach time.Duration
	named, bare    int // PIDs
	byPID          map[int64]*envCount
}

type envCount struct {
	samples int
	full    int    // service.name, service.namespace and deployment.environment.name as the environment sets them
	any     int    // any of those three values
	service string // the service.name of its last sample ("" none)
}

// measureEnviron: a C process (test/enrich/testdata/envspin.c, CPU-bound,
// no process context) named only by OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, the same program without them, and the CPU
// hogs, sampled by the real profiler through the distribution's defaults
// for -run: the named one must get its service and attributes on
// >= 99.9 % of its samples, no other process on any.
func measureEnviron(ctx context.Context, cfg *config, hz int, k kind, dir string) (_ *envResult, err error) {
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
	profPath := filepath.Join(dir, "profiles.jsonl")
	h, err := startHost(ctx, ps, cfg, hz, k, dir, distrun.Config{Profiles: &distrun.Profiles{GRPC: otlpEndpoint, Path: profPath}}.YAML())
	if err != nil {
		return nil, err
	}
	h.logf("envspin %d (named by its environment), %d (no OTEL_ variables)", res.named, res.bare)
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
		}
		return nil
	})
}

func (r *envResult) others() (procs, samples, named int) {
	for pid, c := range r.byPID {
		if pid == int64(r.named) {
			continue
		}
		procs++
		samples += c.samples
		named += c.any
	}
	return
}

func (r *envResult) goalMet() bool {
	c := r.byPID[int64(r.named)]
	_, _, named := r.others()
	return c != nil && c.samples > 0 && float64(c.full) >= 0.999*float64(c.samples) && named == 0
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
	procs, samples, named := r.others()
	fmt.Printf("every other process (%d, the hogs, the collector, ...): %d sample timestamps, %d with any of them\n", procs, samples, named)
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
	fmt.Printf("goal (>= 99.9 %% of the named process's samples carry its resource, no other process's): %s\n", verdict)
}
