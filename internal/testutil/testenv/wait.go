// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// WaitTimeout bounds every wait for something that must happen, on an
// unloaded machine: Scaled stretches it where the machine is measured
// slower.
const WaitTimeout = 20 * time.Second

// TimeScaleEnv: how much slower than an unloaded machine this one runs
// (test/vm's guests measure it before each test binary: an emulated CPU
// the busy host does not schedule for a while); 1 when unset.
const TimeScaleEnv = "OTELCTX_TIME_SCALE"

// TimeScale is TimeScaleEnv's value, at least 1.
func TimeScale() float64 {
	s, err := strconv.ParseFloat(os.Getenv(TimeScaleEnv), 64)
	if err != nil || s < 1 {
		return 1
	}
	return s
}

// Scaled is d stretched by TimeScale: a deadline for something that must
// happen, which a slower machine reaches later.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * TimeScale())
}

// Eventually polls cond until it holds, failing the test after WaitTimeout
// (Scaled).
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, WaitTimeout, what, cond)
}

// CPUWaitTimeout bounds a wait for CPU work other processes must do (a
// number of profile samples of spinning publishers): on a busy 2-core host
// they get a small share of it, and 20 s ran out at load average 15.
const CPUWaitTimeout = 3 * time.Minute

// EventuallyCPU is Eventually for a cond that holds once other processes
// have run long enough (CPUWaitTimeout).
func EventuallyCPU(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, CPUWaitTimeout, what, cond)
}

// EventuallyWithin polls cond until it holds, failing the test after
// timeout (Scaled).
func EventuallyWithin(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyEvery(tb, timeout, 5*time.Millisecond, what, cond)
}

// EventuallyEvery polls cond every interval (for a cond that is costly to
// ask, such as a scrape of a collector's metrics) until it holds, failing
// the test after timeout (Scaled).
func EventuallyEvery(tb testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	tb.Helper()
	timeout = Scaled(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval) // polling interval, not synchronisation
	}
}
