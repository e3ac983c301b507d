// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"os/exec"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// envSamples is one ResourceProfiles without process.pid of n samples
// naming pid, taken from at on, 1 µs apart.
func envSamples(pid, n int, at time.Time) pprofile.Profiles {
	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	for i := range n {
		b.Sample(p, at.Add(time.Duration(i)*time.Microsecond), b.Attr("process.pid", int64(pid)))
	}
	return b.PD
}

// services counts, by service.name ("" for none), the samples of pid in
// out.
func services(t *testing.T, out pprofile.Profiles, pid int) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, r := range byPID(t, out)[int64(pid)] {
		s, _ := r["service.name"].(string)
		n[s]++
	}
	return n
}

// stopSleeper kills a sleeper and reaps it.
func stopSleeper(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// TestEnvNamedKeepsResourceAfterExit: a process named by its environment
// alone keeps its resource for the samples taken while it ran that arrive
// after it exited (as a publisher's retained context does): over a run of
// 100 messages whose last 10 arrive after its exit, every sample is named.
func TestEnvNamedKeepsResourceAfterExit(t *testing.T) {
	cmd := testenv.Sleeper(t, "OTEL_SERVICE_NAME=short-lived")
	pid := cmd.Process.Pid
	c := testCatalog(t)
	h := newHarness(t, c, testPolicy())
	const messages, late, per = 100, 10, 20
	total, named := 0, 0
	count := func(in pprofile.Profiles) {
		total += per
		named += services(t, h.run(in), pid)["short-lived"]
	}
	var inFlight []pprofile.Profiles
	for i := range messages {
		m := envSamples(pid, per, time.Now())
		if i < messages-late {
			count(m)
		} else {
			inFlight = append(inFlight, m)
		}
	}
	stopSleeper(cmd)
	for _, m := range inFlight {
		count(m)
	}
	t.Logf("%d of %d samples named", named, total)
	if named*1000 < total*999 {
		t.Errorf("%d of %d samples named (%.2f %%), want at least 99.9 %%", named, total, 100*float64(named)/float64(total))
	}
}

// TestEnvNamedPIDReuse: a process named by its environment exits and a
// new process gets its PID (forced through ns_last_pid). Samples taken
// after the new process started never get the old one's resource (they
// get the new one's, or none), whichever arrives first; samples the old
// one took before it exited still get its resource.
func TestEnvNamedPIDReuse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string
		want      string // the successor's samples' service.name
		lateFirst bool
	}{
		{"named successor", []string{"OTEL_SERVICE_NAME=new"}, "new", false},
		{"named successor, late samples first", []string{"OTEL_SERVICE_NAME=new"}, "new", true},
		{"unnamed successor", []string{"PATH=/bin"}, "", false},
		{"unnamed successor, late samples first", []string{"PATH=/bin"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := testenv.Sleeper(t, "OTEL_SERVICE_NAME=old")
			pid := old.Process.Pid
			c := testCatalog(t)
			h := newHarness(t, c, testPolicy())
			if got := services(t, h.run(envSamples(pid, 5, time.Now())), pid); got["old"] != 5 {
				t.Fatalf("the old process's samples while it runs: %v", got)
			}
			before, after := handOver(t, old, pid, tc.env...)
			lateMsg, newMsg := envSamples(pid, 5, before), envSamples(pid, 5, after)
			check := func(what string, in pprofile.Profiles, want string) {
				t.Helper()
				got := services(t, h.run(in), pid)
				if got[want] != 5 {
					t.Errorf("%s: samples by service.name %v, want 5 of %q", what, got, want)
				}
			}
			if tc.lateFirst {
				check("samples the old process took", lateMsg, "old")
				check("samples the new process took", newMsg, tc.want)
			} else {
				check("samples the new process took", newMsg, tc.want)
				check("samples the old process took", lateMsg, "old")
			}
		})
	}
}

// TestPublisherPIDReuse: a publishing process exits and a new process gets
// its PID (forced through ns_last_pid) before the catalog hears of the
// exit (a Lost event, once per round), and again after it did. Samples
// taken after the new process started never get the publisher's context
// (they get the new process's environment resource, or none); samples the
// publisher took before it exited still get it.
func TestPublisherPIDReuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string // the successor's samples' service.name
	}{
		{"named successor", []string{"OTEL_SERVICE_NAME=new"}, "new"},
		{"unnamed successor", []string{"PATH=/bin"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := testenv.Sleeper(t, "PATH=/bin")
			pid := old.Process.Pid
			c := testCatalog(t)
			ticks, err := procstat.StartTicks("/proc", pid)
			if err != nil {
				t.Fatal(err)
			}
			p := &publisher.Process{ID: publisher.ProcessID{PID: pid, StartTicks: ticks}, UID: -1, MappingAddr: 0x1000}
			p.Context.Resource.Attributes = append(p.Context.Resource.Attributes, strAttr("service.name", "published"))
			c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
			h := newHarness(t, c, testPolicy())
			if got := services(t, h.run(envSamples(pid, 5, time.Now())), pid); got["published"] != 5 {
				t.Fatalf("the publisher's samples while it runs: %v", got)
			}
			before, after := handOver(t, old, pid, tc.env...)
			check := func(what string, at time.Time, want string) {
				t.Helper()
				got := services(t, h.run(envSamples(pid, 5, at)), pid)
				if got[want] != 5 {
					t.Errorf("%s: samples by service.name %v, want 5 of %q", what, got, want)
				}
			}
			check("before the Lost: samples the new process took", after, tc.want)
			check("before the Lost: samples the publisher took", before, "published")
			c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
			check("after the Lost: samples the new process took", after, tc.want)
			check("after the Lost: samples the publisher took", before, "published")
		})
	}
}

// handOver stops old, the holder of pid, two start-time ticks (10 ms each)
// after its last sample, and starts a sleeper with env on the same PID:
// before is the time of old's last samples, after the successor's start.
func handOver(t *testing.T, old *exec.Cmd, pid int, env ...string) (before, after time.Time) {
	t.Helper()
	before = time.Now()
	testenv.Eventually(t, "two clock ticks past the old holder's last sample", func() bool {
		return time.Since(before) > 20*time.Millisecond
	})
	stopSleeper(old)
	testpub.ClaimPID(t, pid, func() (int, func()) {
		cmd := testenv.Sleeper(t, env...)
		return cmd.Process.Pid, func() { stopSleeper(cmd) }
	})
	return before, time.Now()
}
