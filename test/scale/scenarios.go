// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultMaxProcesses is the extension's limits.max_processes default:
// with more publishers than that, the others are refused and rechecked.
const defaultMaxProcesses = 4096

// discoveryInterval is the extension's default discovery_interval: a
// process is looked at within one.
const discoveryInterval = 30 * time.Second

// result is one line of the report.
type result struct {
	scenario, what string
	hostProcs      int
	tracked        float64
	u              usage
	goal           string
}

func (h *harness) record(r result) {
	h.results = append(h.results, r)
	fmt.Fprintf(os.Stderr, "scale: %s %s: %d host processes, %.0f tracked, CPU %.2f %% of a core (scan rounds %.2f %%), RSS %.1f MiB (max %.1f), %d fds\n",
		r.scenario, r.what, r.hostProcs, r.tracked, r.u.cpu, r.u.scan, r.u.rssMean, r.u.rssMax, r.u.fds)
}

func (h *harness) report() {
	if len(h.results) == 0 {
		return
	}
	fmt.Printf("\n| scenario | load | host processes | contexts tracked | CPU, %% of a core | in scan rounds | RSS mean / max, MiB | fds | goal |\n")
	fmt.Printf("|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range h.results {
		fmt.Printf("| %s | %s | %d | %.0f | %.2f | %.2f | %.1f / %.1f | %d | %s |\n",
			r.scenario, r.what, r.hostProcs, r.tracked, r.u.cpu, r.u.scan, r.u.rssMean, r.u.rssMax, r.u.fds, r.goal)
	}
}

// spawn starts scalepub with args and, for "idle", waits for its "ready"
// line (every child forked).
func (h *harness) spawn(name string, args ...string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	_, err = h.start(name, w, h.pub, args...)
	w.Close()
	if err != nil {
		r.Close()
		return err
	}
	ready := make(chan error, 1)
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		first := true
		for sc.Scan() {
			if first && strings.HasPrefix(sc.Text(), "ready") {
				ready <- nil
			}
			first = false
		}
		ready <- fmt.Errorf("%s exited before it was ready", name)
	}()
	if args[0] != "idle" {
		return nil
	}
	select {
	case err := <-ready:
		return err
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%s: not ready after 5 minutes", name)
	case <-h.stop:
		return errInterrupted
	}
}

func (h *harness) limit(n int) int {
	if h.opt.maxProcesses > 0 {
		return min(n, h.opt.maxProcesses)
	}
	return min(n, defaultMaxProcesses)
}

// scenarioA: idle publishers with threads, steady state.
func (h *harness) scenarioA() error {
	n := h.opt.publishers
	per := (h.opt.threads + n - 1) / n
	if err := h.tasks(n*(per+1) + 5000); err != nil {
		return err
	}
	if err := h.spawn("publishers", "idle", strconv.Itoa(n), strconv.Itoa(per), "1"); err != nil {
		return err
	}
	c, err := h.startCollector("a")
	if err != nil {
		return err
	}
	if _, err := h.waitTracked(c, h.limit(n)); err != nil {
		return err
	}
	// The first looks at every process are over; what is measured is the
	// steady state (polls, listings, rechecks).
	if err := h.pause(discoveryInterval); err != nil {
		return err
	}
	u, err := h.measure(c, h.opt.window)
	if err != nil {
		return err
	}
	tracked, _ := c.metric("otelcol_processctx_contexts")
	h.record(result{scenario: "a", what: fmt.Sprintf("%d idle publishers, %d threads", n, n*per), hostProcs: hostProcesses(),
		tracked: tracked, u: u, goal: verdict(u.cpu <= 1 && u.rssMax <= 100, "≤ 1 % and ≤ 100 MB")})
	return nil
}

// scenarioB: new publishers every second beside idle ones.
func (h *harness) scenarioB() error {
	n, rate := h.opt.churnIdle, h.opt.churnRate
	life := int(h.opt.churnLife / time.Second)
	if err := h.tasks(n + rate*life*2 + 5000); err != nil {
		return err
	}
	if err := h.spawn("publishers", "idle", strconv.Itoa(n), "0", "1"); err != nil {
		return err
	}
	c, err := h.startCollector("b")
	if err != nil {
		return err
	}
	if _, err := h.waitTracked(c, h.limit(n)); err != nil {
		return err
	}
	if err := h.pause(discoveryInterval); err != nil {
		return err
	}
	if err := h.spawn("churn", "churn", strconv.Itoa(rate), strconv.Itoa(life)); err != nil {
		return err
	}
	if err := h.pause(h.opt.churnLife + 5*time.Second); err != nil { // the churn at its steady count
		return err
	}
	rescans0, _ := c.metric("otelcol_processctx_prctl_rescans")
	u, err := h.measure(c, h.opt.window)
	if err != nil {
		return err
	}
	rescans1, _ := c.metric("otelcol_processctx_prctl_rescans")
	tracked, _ := c.metric("otelcol_processctx_contexts")
	h.record(result{scenario: "b", what: fmt.Sprintf("%d new publishers/s (each %v) beside %d idle; %.0f prctl rescans/s",
		rate, h.opt.churnLife, n, (rescans1-rescans0)/h.opt.window.Seconds()), hostProcs: hostProcesses(),
		tracked: tracked, u: u, goal: verdict(u.cpu <= 5, "≤ 5 %")})
	return nil
}

// scenarioC: non-publishing processes, growing.
func (h *harness) scenarioC() error {
	last := h.opt.idleSteps[len(h.opt.idleSteps)-1]
	if err := h.tasks(last + 5000); err != nil {
		return err
	}
	c, err := h.startCollector("c")
	if err != nil {
		return err
	}
	if err := h.pause(discoveryInterval); err != nil {
		return err
	}
	started := 0
	for _, step := range h.opt.idleSteps {
		if step > started {
			if err := h.spawn(fmt.Sprintf("idle-%d", step), "idle", strconv.Itoa(step-started), "0", "0"); err != nil {
				return err
			}
			started = step
		}
		// One listing has looked at every new process; then a window.
		if err := h.pause(discoveryInterval + 5*time.Second); err != nil {
			return err
		}
		u, err := h.measure(c, 30*time.Second)
		if err != nil {
			return err
		}
		tracked, _ := c.metric("otelcol_processctx_contexts")
		h.record(result{scenario: "c", what: fmt.Sprintf("+%d non-publishing", step), hostProcs: hostProcesses(),
			tracked: tracked, u: u, goal: "curve"})
	}
	return nil
}

func verdict(met bool, goal string) string {
	if met {
		return goal + ": met"
	}
	return goal + ": **missed**"
}

func runOutput(path string, args ...string) ([]byte, error) {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd.CombinedOutput()
}
