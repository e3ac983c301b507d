// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// FloorAttempts: measurements before a missed floor fails the test.
const FloorAttempts = 3

// Runner is the part of *testing.T MeasureFloors uses.
type Runner interface {
	Helper()
	Run(name string, f func(t *testing.T)) bool
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// MeasureFloors runs measure in subtest attempt1 and, while it returns
// missed floors, again (attempt2, attempt3): a rate or an amount (samples
// taken, links made) below its floor is what a run starved by the host's
// other work looks like (CI's two shared cores, QEMU guests beside), so it
// is measured again, with a log line saying so. What measure reports
// through its t (a wrong link, wrong data) fails at once: no more attempts.
func MeasureFloors(t Runner, measure func(t *testing.T) (misses []string)) {
	t.Helper()
	var misses []string
	for attempt := 1; attempt <= FloorAttempts; attempt++ {
		misses = nil
		if !t.Run(fmt.Sprintf("attempt%d", attempt), func(t *testing.T) { misses = measure(t) }) {
			return
		}
		if len(misses) == 0 {
			return
		}
		if attempt < FloorAttempts {
			t.Logf("attempt %d missed a floor (a starved run?), measuring again: %s", attempt, strings.Join(misses, "; "))
		}
	}
	t.Errorf("%d attempts missed a floor; the last: %s", FloorAttempts, strings.Join(misses, "; "))
}
