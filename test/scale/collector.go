// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// config is the collector's configuration: the process_ctx extension and
// receiver with their default settings, entity events to the debug
// exporter (as the distribution's configuration has them), the
// collector's own metrics on a free loopback port.
const config = `extensions:
  process_ctx:%s
receivers:
  process_ctx: {}
exporters:
  debug:
    verbosity: basic
service:
  extensions: [process_ctx]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
    logs:
      receivers: [process_ctx]
      exporters: [debug]
`

// collector is a running distribution.
type collector struct {
	*proc
	pid  int
	port int
}

func (h *harness) startCollector(scenario string) (*collector, error) {
	ext := " {}"
	if h.opt.maxProcesses > 0 {
		ext = fmt.Sprintf("\n    limits:\n      max_processes: %d", h.opt.maxProcesses)
	}
	return h.startDist(h.opt.dist, scenario, ext)
}

// startDist starts the distribution binary dist, ext the process_ctx
// extension's configuration (YAML after "process_ctx:").
func (h *harness) startDist(dist, scenario, ext string) (*collector, error) {
	path := filepath.Join(h.dir, "collector-"+scenario+".yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, config, ext, h.port), 0o600); err != nil {
		return nil, err
	}
	if out, err := runOutput(dist, "validate", "--config", path); err != nil {
		return nil, fmt.Errorf("the distribution refuses the configuration %s: %v\n%s", path, err, out)
	}
	log, err := os.Create(filepath.Join(h.dir, "collector-"+scenario+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	p, err := h.start("collector", log, dist, "--config", path)
	if err != nil {
		return nil, err
	}
	return &collector{proc: p, pid: p.cmd.Process.Pid, port: h.port}, nil
}

// metric sums the samples of a metric of the collector's telemetry
// (any labels); ok is false when it is not exported (yet).
func (c *collector) metric(name string) (float64, bool) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.port))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(line) // name{labels} value [timestamp]; labels hold no spaces here
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// waitTracked waits until the collector tracks at least n contexts (its
// otelcol_processctx_contexts gauge), for at most the -settle time.
func (h *harness) waitTracked(c *collector, n int) (float64, error) {
	deadline := time.Now().Add(h.opt.settle)
	var last float64
	for {
		select {
		case <-c.done:
			return 0, fmt.Errorf("the collector exited (log in %s)", h.dir)
		default:
		}
		v, ok := c.metric("otelcol_processctx_contexts")
		if ok {
			last = v
		}
		if ok && v >= float64(n) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%v contexts tracked after %v, want %d", last, h.opt.settle, n)
		}
		if err := h.pause(time.Second); err != nil {
			return last, err
		}
	}
}

// usage is what the collector used over a window.
type usage struct {
	cpu             float64 // % of one core
	scan            float64 // of which the scanner's rounds (scan_duration), % of one core
	rssMean, rssMax float64 // MiB
	fds             int     // at the end
}

// measure samples the collector every second for d.
func (h *harness) measure(c *collector, d time.Duration) (usage, error) {
	scan0, _ := c.metric("otelcol_processctx_scan_duration_sum")
	t0, c0, err := cpuTicks(c.pid)
	if err != nil {
		return usage{}, err
	}
	var u usage
	n := 0
	for end := t0.Add(d); time.Now().Before(end); {
		if err := h.pause(time.Second); err != nil {
			return u, err
		}
		rss, err := rssMiB(c.pid)
		if err != nil {
			return u, err
		}
		u.rssMean += rss
		u.rssMax = max(u.rssMax, rss)
		n++
	}
	t1, c1, err := cpuTicks(c.pid)
	if err != nil {
		return u, err
	}
	scan1, _ := c.metric("otelcol_processctx_scan_duration_sum")
	u.rssMean /= float64(max(n, 1))
	u.cpu = 100 * float64(c1-c0) / 100 / t1.Sub(t0).Seconds() // USER_HZ is 100
	u.scan = 100 * (scan1 - scan0) / t1.Sub(t0).Seconds()     // wall time in rounds, seconds
	u.fds, err = openFDs(c.pid)
	return u, err
}

// cpuTicks reads utime+stime of a process (all its threads).
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

func rssMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS") }

// statusMiB reads a kB field of /proc/PID/status (VmRSS, VmHWM).
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

func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

func hostProcesses() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}
