// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// budgetLoads are the contexts scenario d publishes, as commands of
// testdata/publishers/otel_ctx_publisher.c after the ordinary resource.
var budgetLoads = []struct{ name, what string }{
	{"ordinary", ""},
	// 63 KiB of tiny nested values: 2 attributes, each an array of 128
	// arrays of 120 empty AnyValues.
	{"nested", "nested 2 128 120"},
	// 128 entity references naming two nested attributes each: every
	// reference is a copy of them in each entity event.
	{"entityrefs", "nested 2 16 16\nentityrefs 128"},
	// The largest contexts accepted: just under the budget (2 x 64 KiB
	// decoded), of nested values alone, and of values that 16 entity
	// references copy into every entity event.
	{"at-budget", "nested 2 8 58"},
	{"at-budget-refs", "nested 1 5 8\nentityrefs 16"},
}

// budgetPublisher is the name scenario d gives otel_ctx_publisher, which
// the collector is restricted to.
const budgetPublisher = "budgetpub"

// budgetRow is one line of scenario d's report.
type budgetRow struct {
	dist, load string
	tracked    float64 // contexts tracked at the end (the others refused)
	hwm        float64 // the collector's VmHWM, MB
	perPub     float64 // (hwm - ordinary's hwm) / publishers, MB
}

// scenarioD: the collector's peak RSS with n publishers of each load, for
// each binary (-before-dist first when set), in this one run.
func (h *harness) scenarioD() error {
	src := h.opt.publisherSrc
	// The publishers run as nobody: they must reach their binary.
	if err := os.Chmod(h.dir, 0o755); err != nil {
		return err
	}
	pub := filepath.Join(h.dir, budgetPublisher)
	if out, err := exec.Command(h.opt.cc, "-O2", "-Wall", "-pthread", "-o", pub, src).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling %s: %v\n%s", src, err, out)
	}
	dists := []string{h.opt.dist}
	if h.opt.beforeDist != "" {
		dists = []string{h.opt.beforeDist, h.opt.dist}
	}
	for _, dist := range dists {
		var base float64
		for _, load := range budgetLoads {
			hwm, tracked, err := h.peakWith(dist, pub, load.name, load.what)
			h.stopAll()
			if err != nil {
				return err
			}
			if load.name == "ordinary" {
				base = hwm
			}
			r := budgetRow{dist: dist, load: load.name, tracked: tracked, hwm: hwm, perPub: (hwm - base) / float64(h.opt.budgetPublishers)}
			h.budget = append(h.budget, r)
			fmt.Fprintf(os.Stderr, "scale: d %s %s: %.0f tracked, VmHWM %.1f MB, %+.2f MB a publisher against ordinary\n", dist, load.name, tracked, hwm, r.perPub)
		}
	}
	return nil
}

// peakWith runs n publishers of one load, then the collector until it has
// read every one (tracked or refused) and for -budget-window more; its
// VmHWM and the contexts it tracks.
func (h *harness) peakWith(dist, pub, load, cmds string) (hwm, tracked float64, err error) {
	n := h.opt.budgetPublishers
	for i := range n {
		script := fmt.Sprintf("set service.name budget-%s\nset service.instance.id %s-%d\nset service.version 1.0.0\n", load, load, i)
		if cmds != "" {
			script += cmds + "\n"
		}
		if err := h.startPublisher(pub, script+"publish\n"); err != nil {
			return 0, 0, err
		}
	}
	// Only these publishers: other processes of the host that publish
	// (tests running beside) would add their own contexts.
	c, err := h.startDist(dist, "d-"+load, "\n    include:\n      executables: ["+budgetPublisher+"]")
	if err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(h.opt.settle)
	for {
		tracked, _ := c.metric("otelcol_processctx_contexts")
		failed, _ := c.metric("otelcol_processctx_reads_failed")
		if tracked+failed >= float64(n) {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s: %v contexts tracked and %v reads failed after %v, want %d", load, tracked, failed, h.opt.settle, n)
		}
		if err := h.pause(time.Second); err != nil {
			return 0, 0, err
		}
	}
	if err := h.pause(h.opt.budgetWindow); err != nil {
		return 0, 0, err
	}
	tracked, _ = c.metric("otelcol_processctx_contexts")
	mib, err := statusMiB(c.pid, "VmHWM")
	return mib * (1 << 20) / 1e6, tracked, err
}

// startPublisher starts one otel_ctx_publisher as an unprivileged user
// (nobody), sends it script, and waits for one "ok" per line. Its stdin
// stays open until it is killed: at EOF it would exit.
func (h *harness) startPublisher(pub, script string) error {
	cmd := exec.Command(pub)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if _, err := h.startCmd("publisher", cmd); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ready ") {
		return fmt.Errorf("publisher: no greeting")
	}
	for _, line := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			return err
		}
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ok") {
			return fmt.Errorf("publisher: %q: %q", line, sc.Text())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return nil
}

func (h *harness) reportBudget() {
	if len(h.budget) == 0 {
		return
	}
	fmt.Printf("\n| binary | %d publishers of | tracked | collector VmHWM, MB | added per publisher vs ordinary, MB | goal |\n", h.opt.budgetPublishers)
	fmt.Printf("|---|---|---:|---:|---:|---|\n")
	for _, r := range h.budget {
		goal := ""
		if r.load != "ordinary" {
			goal = verdict(r.perPub <= 0.5, "≤ 0.5 MB")
		}
		fmt.Printf("| %s | %s | %.0f | %.1f | %+.2f | %s |\n", r.dist, r.load, r.tracked, r.hwm, r.perPub, goal)
	}
}
