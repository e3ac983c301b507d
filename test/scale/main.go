// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command scale measures the otelctx distribution against host scale (make
// scale; as root, it takes about ten minutes): the collector's CPU (% of one
// core), RSS and open fds with its default settings while
//
//	a: 10,000 idle publishers run, with 100,000 threads among them;
//	b: 50 new publishers a second start (each living 10 s) beside 3,000
//	   idle ones;
//	c: the host's non-publishing processes grow from 100 to 10,000;
//	d (not by default): the peak RSS (VmHWM) with 40 publishers of hostile
//	   contexts against 40 ordinary ones, for -dist and -before-dist.
//
// The processes are forked by testdata/scalepub.c (compiled with cc); every
// process this program starts is killed when it returns, fails or is
// interrupted, and kernel.pid_max/threads-max are restored if raised.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	dist, cc  string
	scenarios string
	window    time.Duration
	settle    time.Duration
	// a
	publishers, threads int
	// b
	churnIdle, churnRate int
	churnLife            time.Duration
	// c
	idleSteps []int
	// maxProcesses, when set, is the extension's limits.max_processes.
	maxProcesses int
	// d
	publisherSrc, beforeDist string
	budgetPublishers         int
	budgetWindow             time.Duration
}

func main() {
	var o options
	var steps string
	flag.StringVar(&o.dist, "dist", "_build/dist/otelcol-otelctx", "the distribution binary (make build)")
	flag.StringVar(&o.cc, "cc", "cc", "C compiler for scalepub.c")
	flag.StringVar(&o.scenarios, "scenarios", "a,b,c", "scenarios to run")
	flag.DurationVar(&o.window, "window", 2*time.Minute, "steady measurement window (a, b)")
	flag.DurationVar(&o.settle, "settle", 5*time.Minute, "longest wait for the collector to track the publishers")
	flag.IntVar(&o.publishers, "publishers", 10000, "a: idle publishers")
	flag.IntVar(&o.threads, "threads", 100000, "a: threads among them (besides their main threads)")
	flag.IntVar(&o.churnIdle, "churn-idle", 3000, "b: idle publishers")
	flag.IntVar(&o.churnRate, "churn-rate", 50, "b: new publishers per second")
	flag.DurationVar(&o.churnLife, "churn-life", 10*time.Second, "b: life of each new publisher")
	flag.IntVar(&o.maxProcesses, "max-processes", 0, "the extension's limits.max_processes (0: its default, 4096)")
	flag.StringVar(&o.publisherSrc, "publisher-src", "testdata/publishers/otel_ctx_publisher.c", "d: the C test publisher")
	flag.StringVar(&o.beforeDist, "before-dist", "", "d: a second distribution binary measured first (e.g. main's)")
	flag.IntVar(&o.budgetPublishers, "budget-publishers", 40, "d: publishers of each load")
	flag.DurationVar(&o.budgetWindow, "budget-window", 30*time.Second, "d: time after every publisher was read")
	flag.StringVar(&steps, "idle-steps", "100,1000,3000,10000", "c: non-publishing processes, cumulative steps")
	flag.Parse()
	for _, f := range strings.Split(steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "scale: bad -idle-steps %q\n", steps)
			os.Exit(2)
		}
		o.idleSteps = append(o.idleSteps, n)
	}
	os.Exit(run(o))
}

// run owns every resource: its deferred cleanup runs on return, on a
// panic, and (through the signal handler's cancel) on SIGINT/SIGTERM.
func run(o options) (code int) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "scale: run as root (process_vm_readv of other processes, eBPF, sysctls)")
		return 2
	}
	if _, err := os.Stat(o.dist); err != nil {
		fmt.Fprintf(os.Stderr, "scale: %v (make build first)\n", err)
		return 2
	}
	env := &harness{opt: o}
	defer env.cleanup()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	go func() {
		if s, ok := <-sig; ok {
			fmt.Fprintf(os.Stderr, "\nscale: %v, stopping\n", s)
			env.interrupt()
		}
	}()
	if err := env.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	for _, s := range strings.Split(o.scenarios, ",") {
		var err error
		switch strings.TrimSpace(s) {
		case "a":
			err = env.scenarioA()
		case "b":
			err = env.scenarioB()
		case "c":
			err = env.scenarioC()
		case "d":
			err = env.scenarioD()
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		env.stopAll()
		if errors.Is(err, errInterrupted) {
			return 130
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "scale: scenario %s: %v\n", s, err)
			code = 1
		}
	}
	env.report()
	env.reportBudget()
	return code
}
