// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"os"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// stormEnv sets the window of TestPrctlStormCost, a measurement
// (BENCHMARKS.md), not run otherwise.
const stormEnv = "OTELCTX_STORM_WINDOW"

// userHZ is the unit of /proc/PID/stat times.
const userHZ = 100

// TestPrctlStormCost measures what a publisher storming
// prctl(PR_SET_VMA_ANON_NAME, "OTEL_CTX") and its stamp costs the built
// distribution (default configuration, the eBPF sampler's prctl events):
// the collector's CPU time over a window without the storm, then over one
// with it. It logs the figures and asserts nothing.
func TestPrctlStormCost(t *testing.T) {
	window, err := time.ParseDuration(os.Getenv(stormEnv))
	if err != nil || window <= 0 {
		t.Skipf("a measurement: set %s (e.g. 60s) and %s", stormEnv, testenv.DistEnv)
	}
	testenv.RequireRoot(t)
	a := startHostile(t)
	col := startCollector(t, "auto", a.PID)
	eventually(t, "the publisher announced", func() bool { return col.announced(t, a.PID, "hostile") })

	cpu := func() float64 {
		t0, c0 := time.Now(), col.cpuTicks(t)
		time.Sleep(window) // the measurement window
		c1, t1 := col.cpuTicks(t), time.Now()
		return float64(c1-c0) / userHZ / t1.Sub(t0).Seconds() * 100
	}
	idle := cpu()
	a.Do("storm")
	storm := cpu()
	t.Logf("%s: collector CPU %.2f %% of a core idle, %.2f %% during the storm: the storm costs %.2f %% of a core (window %v)",
		os.Getenv(testenv.DistEnv), idle, storm, storm-idle, window)
}
