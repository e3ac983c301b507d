// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemlockProblem: EPERM from raising the limit (a kernel before 5.11
// without CAP_SYS_RESOURCE) names the limit and both fixes; any other
// outcome is not this cause.
func TestMemlockProblem(t *testing.T) {
	why := memlockProblem(fmt.Errorf("failed to set memlock rlimit: %w", unix.EPERM))
	for _, want := range []string{"before 5.11", "RLIMIT_MEMLOCK", "CAP_SYS_RESOURCE", "LimitMEMLOCK=infinity", "memlock=-1"} {
		if !strings.Contains(why, want) {
			t.Errorf("%q does not say %q", why, want)
		}
	}
	for _, err := range []error{nil, errors.New("other"), unix.EINVAL} {
		if why := memlockProblem(err); why != "" {
			t.Errorf("%v: %q", err, why)
		}
	}
}
