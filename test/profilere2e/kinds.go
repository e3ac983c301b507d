// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// kind is one publisher make e2e-profiler measures: threadpub.c (the
// OTEP 4947 TLS pointer), or a Node.js service traced by dd-trace
// (testdata/node/e2e.js, the nodejs_v1_dev walk). Both speak the same
// line protocol.
type kind struct {
	name    string
	service string // the service.name its process context publishes
	start   func(ps *procs, logPath string) (*publisher, error)
	// node kinds: the node binary and the environment of a service traced
	// by dd-trace (the cputime mode runs testdata/node/routes.js with them).
	node    string
	nodeEnv func() []string
	root    string
	// requests: the publisher is driven by HTTP requests, not threadpub's
	// line protocol (no workers to start).
	requests bool
}

func threadpubKind(exe string) kind {
	// A service of its own: tests running on the host publish threadpub
	// too, with the same routes, and the profiler samples them all.
	service := fmt.Sprintf("%s-e2e-%d", serviceName, os.Getpid())
	return kind{name: "threadpub", service: service, start: func(ps *procs, logPath string) (*publisher, error) {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "THREADPUB_SERVICE="+service)
		return startPublisher(ps, cmd, logPath)
	}}
}

// nodeKind runs e2e.js with the Node release and dd-trace make node-deps
// installed in _build/node.
func nodeKind(root, major string) (kind, error) {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	node := filepath.Join(root, "_build", "node", "node-"+major, "node_modules", "node-linux-"+arch, "bin", "node")
	modules := filepath.Join(root, "_build", "node", "tracer", "node_modules")
	for _, p := range []string{node, filepath.Join(modules, "dd-trace")} {
		if _, err := os.Stat(p); err != nil {
			return kind{}, fmt.Errorf("node publisher: %v (make node-deps installs it)", err)
		}
	}
	script := filepath.Join(root, "testdata", "node", "e2e.js")
	env := func() []string {
		toBoot, toReal := clockOffsets()
		return append(os.Environ(), "NODE_PATH="+modules, "DD_TRACE_OTEL_CTX_ENABLED=true",
			"DD_TRACE_AGENT_URL=http://127.0.0.1:9", "DD_INSTRUMENTATION_TELEMETRY_ENABLED=false",
			"DD_REMOTE_CONFIGURATION_ENABLED=false", "DD_TRACE_STARTUP_LOGS=false",
			fmt.Sprintf("NODEPUB_BOOT_OFFSET=%d", toBoot), fmt.Sprintf("NODEPUB_REAL_OFFSET=%d", toReal))
	}
	return kind{name: "node" + major, service: "otelctx-nodepub", node: node, nodeEnv: env, root: root, start: func(ps *procs, logPath string) (*publisher, error) {
		cmd := exec.Command(node, script)
		cmd.Env = env()
		return startPublisher(ps, cmd, logPath)
	}}, nil
}

// clockOffsets: CLOCK_BOOTTIME and CLOCK_REALTIME minus CLOCK_MONOTONIC.
func clockOffsets() (toBoot, toReal int64) {
	var mono, boot, real unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &real)
	return boot.Nano() - mono.Nano(), real.Nano() - mono.Nano()
}

// kinds parses -publishers ("threadpub", "node24", ...).
func kinds(list, threadpubExe string) ([]kind, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	var out []kind
	for _, name := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' }) {
		switch {
		case name == "threadpub":
			out = append(out, threadpubKind(threadpubExe))
		case strings.HasPrefix(name, "node"):
			k, err := nodeKind(root, strings.TrimPrefix(name, "node"))
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		default:
			return nil, fmt.Errorf("-publishers: unknown publisher %q (threadpub, node24, ...)", name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-publishers: none given")
	}
	return out, nil
}
