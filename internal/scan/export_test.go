// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import "time"

// DropPagemaps closes the pagemap each tracked publisher holds, as when
// opening it failed (EMFILE) at tracking: its polls then open it each time.
func (s *Scanner) DropPagemaps() {
	for _, t := range s.order {
		_ = t.pm.Close()
		t.pm = nil
		if t.mem != nil {
			t.mem.UsePagemap(nil)
		}
	}
}

// SlowPolls makes every poll look as if it cost an hour to the round
// budget's clock, so that each one overruns its share; restore undoes it.
func SlowPolls() (restore func()) {
	since = func(time.Time) time.Duration { return time.Hour }
	return func() { since = time.Since }
}

// ForgetOverruns lifts every round-budget quarantine.
func (s *Scanner) ForgetOverruns() {
	for _, t := range s.order {
		t.overrun = nil
	}
}
