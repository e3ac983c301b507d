// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"os/exec"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
)

// BenchmarkResolvePID is the cost of resolving one PID a message names, on
// a real process that sets OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES:
// publisher is today's join (a cataloged publisher, the baseline);
// env_first the first lookup of a process identity (stat, environ read
// with its deadline worker, parse, cgroup); env_cached a lookup of data
// older than the last check (no system call); env_recheck one of newer
// data (one stat to confirm the PID's holder).
func BenchmarkResolvePID(b *testing.B) {
	cmd := exec.Command("sleep", "3600")
	cmd.Env = []string{"PATH=/bin", "HOME=/root", "OTEL_SERVICE_NAME=bench",
		"OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop,deployment.environment.name=prod,service.version=1.2.3"}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		b.Fatal(err)
	}
	past := time.Now().Add(-time.Millisecond).UnixNano()
	enabled := func(b *testing.B) *Catalog {
		c := New()
		if err := enableEnvironment(c, "/proc", 0); err != nil {
			b.Fatal(err)
		}
		return c
	}

	b.Run("publisher", func(b *testing.B) {
		c := New()
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: &publisher.Process{ID: publisher.ProcessID{PID: pid, StartTicks: ticks}, MappingAddr: 1}}})
		for b.Loop() {
			if _, how := c.ProcessFor(pid, past, past, Claims{}); how != Found {
				b.Fatal(how)
			}
		}
	})
	b.Run("env_first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			c := enabled(b)
			b.StartTimer()
			if _, how := c.ProcessFor(pid, past, past, Claims{}); how != Found {
				b.Fatal(how, c.EnvStats())
			}
		}
	})
	b.Run("env_cached", func(b *testing.B) {
		c := enabled(b)
		c.ProcessFor(pid, past, past, Claims{})
		for b.Loop() {
			if _, how := c.ProcessFor(pid, past, past, Claims{}); how != Found {
				b.Fatal(how)
			}
		}
	})
	b.Run("env_recheck", func(b *testing.B) {
		c := enabled(b)
		c.ProcessFor(pid, past, past, Claims{})
		for b.Loop() {
			now := time.Now().UnixNano()
			if _, how := c.ProcessFor(pid, past, now, Claims{}); how != Found {
				b.Fatal(how)
			}
		}
	})
}
