// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Marker starts every console line guestinit writes; the rest of the
// console (kernel messages) is kept for the failure report.
// Marker+"run NAME TIMEOUT SCALE CALIBRATION_MS" opens a test binary's
// output (its -test.timeout in seconds, the time scale it runs with,
// CalibrationLoop's time before it), "out NAME LINE"
// carries one line of it, "exit NAME CODE SECONDS" closes it.
const Marker = "@@otelctx-vm "

// Run is one test binary run by guestinit: its guest path, its arguments,
// its working directory (its package's directory, for relative testdata
// paths), extra environment entries and its deadline on an unloaded host
// (guestinit scales it, see Plan.CalibrationRef).
type Run struct {
	Name    string        `json:"name"`
	Path    string        `json:"path"`
	Args    []string      `json:"args"`
	Dir     string        `json:"dir"`
	Env     []string      `json:"env"`
	Timeout time.Duration `json:"timeout"`
}

// Plan is guestinit's /plan.json.
type Plan struct {
	Runs   []Run    `json:"runs"`
	Env    []string `json:"env"`
	Sysctl []string `json:"sysctl"` // "key/path=value" under /proc/sys
	// Kallsyms: a device guestinit copies /proc/kallsyms's text symbols to
	// before the runs (with kernel/kptr_restrict=0), "" for none.
	Kallsyms string `json:"kallsyms"`
	// CalibrationRef: how long CalibrationLoop takes in this machine's
	// guest on an unloaded host. Before each run guestinit times the loop;
	// the ratio (TimeScale) stretches the run's deadline and, through
	// TimeScaleEnv, the tests' own waits: a guest whose vCPU the host
	// starves gets more time, a hang in the code under test still ends at
	// a deadline.
	CalibrationRef time.Duration `json:"calibration_ref"`
}

// TimeScaleEnv passes the time scale to the guest's tests (testenv
// stretches its waits by it).
const TimeScaleEnv = testenv.TimeScaleEnv

// MaxTimeScale bounds the stretch: past it a run is too slow to tell a
// starved guest from a hung one, and the deadline holds.
const MaxTimeScale = 5

// calibrationRounds of a multiply-add: about 0.15 s in a TCG guest on an
// unloaded host, little beside the tests.
const calibrationRounds = 80_000_000

// calibrationSink keeps the loop from being optimised away (atomic: read by
// nothing, but a store the compiler must keep).
var calibrationSink atomic.Uint64

// CalibrationLoop times a fixed amount of guest CPU work (wall time in
// the guest, which under TCG is the host's: a vCPU the host does not
// schedule makes it longer).
func CalibrationLoop() time.Duration {
	start := time.Now()
	x := uint64(time.Now().UnixNano())
	for i := 0; i < calibrationRounds; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	calibrationSink.Store(x)
	return time.Since(start)
}

// TimeScale is measured/ref, between 1 and MaxTimeScale, rounded up to a
// tenth (1 when ref is unknown).
func TimeScale(measured, ref time.Duration) float64 {
	if ref <= 0 || measured <= ref {
		return 1
	}
	return math.Min(MaxTimeScale, math.Ceil(10*float64(measured)/float64(ref))/10)
}
