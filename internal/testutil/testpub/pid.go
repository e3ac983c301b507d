// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testpub

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// ClaimPID retries starts (writing want-1 to ns_last_pid before each) until
// one gets PID want: other processes may take it first. Never: skip (fail under CI=true).
func ClaimPID(t *testing.T, want int, start func() (pid int, stop func())) {
	t.Helper()
	testenv.RequireRoot(t)
	const nsLastPID = "/proc/sys/kernel/ns_last_pid"
	if want <= 1 {
		t.Fatalf("cannot claim pid %d", want)
	}
	const attempts = 200
	for i := 0; i < attempts; i++ {
		if err := os.WriteFile(nsLastPID, []byte(strconv.Itoa(want-1)), 0); err != nil {
			testenv.Missing(t, fmt.Sprintf("%s is not writable (%v)", nsLastPID, err))
		}
		pid, stop := start()
		if pid == want {
			t.Logf("pid %d reused after %d attempt(s)", want, i+1)
			return
		}
		stop()
	}
	testenv.Missing(t, fmt.Sprintf("pid %d could not be obtained in %d attempts: other processes took it first", want, attempts))
}
