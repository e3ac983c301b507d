// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"fmt"
	"testing"
)

// fakeRunner runs each attempt with a nil *testing.T; an attempt in fail
// reports as failed, as one whose measure called t.Error would.
type fakeRunner struct {
	fail   map[string]bool
	ran    []string
	errors []string
}

func (r *fakeRunner) Helper()                   {}
func (r *fakeRunner) Logf(string, ...any)       {}
func (r *fakeRunner) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }
func (r *fakeRunner) Run(name string, f func(*testing.T)) bool {
	r.ran = append(r.ran, name)
	f(nil)
	return !r.fail[name]
}

// A missed floor is measured again, up to FloorAttempts times, then fails;
// a measure that meets its floors, or that failed through its t, stops the
// attempts.
func TestMeasureFloors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		passAt    int             // the attempt that meets its floors (0: none)
		fail      map[string]bool // attempts that fail through t
		wantCalls int
		wantErr   bool
	}{
		{"first", 1, nil, 1, false},
		{"second", 2, nil, 2, false},
		{"last", FloorAttempts, nil, FloorAttempts, false},
		{"never", 0, nil, FloorAttempts, true},
		{"wrong data", 0, map[string]bool{"attempt1": true}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fakeRunner{fail: tc.fail}
			calls := 0
			MeasureFloors(r, func(*testing.T) []string {
				calls++
				if calls == tc.passAt {
					return nil
				}
				return []string{"a floor"}
			})
			if calls != tc.wantCalls || len(r.ran) != tc.wantCalls {
				t.Errorf("%d measurements (%v), want %d", calls, r.ran, tc.wantCalls)
			}
			if (len(r.errors) > 0) != tc.wantErr {
				t.Errorf("errors %q, want an error: %v", r.errors, tc.wantErr)
			}
		})
	}
}
