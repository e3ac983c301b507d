// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"os"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// stormEnv sets the window of each half of BenchmarkPrctlStormCost (20 s
// when unset).
const stormEnv = "OTELCTX_STORM_WINDOW"

// userHZ is the unit of /proc/PID/stat times.
const userHZ = 100

// BenchmarkPrctlStormCost measures what a publisher storming
// prctl(PR_SET_VMA_ANON_NAME, "OTEL_CTX") and its stamp costs the built
// distribution (default configuration, the eBPF sampler's prctl events):
// the collector's CPU time over a window without the storm, then over one
// with it (BENCHMARKS.md). Metrics: the collector's share of a core, idle
// and during the storm, in percent, and their difference.
//
//	OTELCTX_DIST_BIN=$PWD/_build/dist/otelcol-otelctx OTELCTX_STORM_WINDOW=60s \
//	  go test -run '^$' -bench PrctlStormCost -benchtime 1x ./test/hostile
func BenchmarkPrctlStormCost(b *testing.B) {
	window := 20 * time.Second
	if v := os.Getenv(stormEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration", stormEnv, v)
		}
		window = d
	}
	testenv.RequireRoot(b)
	var idle, storm float64
	for range b.N { // a storm does not stop: a new publisher and collector each time
		i, s := stormCost(b, window)
		idle += i / float64(b.N)
		storm += s / float64(b.N)
	}
	b.ReportMetric(idle, "idle-%cpu")
	b.ReportMetric(storm, "storm-%cpu")
	b.ReportMetric(storm-idle, "cost-%cpu")
}

// stormCost is the collector's CPU (percent of a core) over window before
// and over window during the storm.
func stormCost(b *testing.B, window time.Duration) (idle, storm float64) {
	a := startHostile(b)
	col := startCollector(b, "auto", a.PID)
	defer col.stopWithin(b, 10*time.Second)
	eventually(b, "the publisher announced", func() bool { return col.announced(b, a.PID, "hostile") })
	cpu := func() float64 {
		t0, c0 := time.Now(), col.cpuTicks(b)
		time.Sleep(window) // the measurement window
		c1, t1 := col.cpuTicks(b), time.Now()
		return float64(c1-c0) / userHZ / t1.Sub(t0).Seconds() * 100
	}
	idle = cpu()
	a.Do("storm")
	return idle, cpu()
}
