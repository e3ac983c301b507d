package testpub

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/otelctx/otelctx/internal/testenv"
)

// ClaimPID starts processes with start until one gets PID want, by writing
// want-1 to /proc/sys/kernel/ns_last_pid right before each start; a process
// that got another PID is stopped with its stop function. Other processes
// and threads on the host may take the PID first, so this is retried; if it
// never works the test is skipped locally (failed under CI=true, where the
// machine is the test's own).
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
