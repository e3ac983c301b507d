// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"os/exec"
	"testing"

	"github.com/otelctx/otelctx/internal/proc/pidclock"
)

func TestReadMovesWithNewTasks(t *testing.T) {
	before := readPIDClock("")
	if !before.OK {
		t.Fatal("/proc/stat or /proc/loadavg unreadable")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	after := readPIDClock("")
	if after.Forks <= before.Forks {
		t.Errorf("forks %d then %d across a new process", before.Forks, after.Forks)
	}
	if readPIDMax("") <= pidclock.ReservedPIDs {
		t.Errorf("pid_max %d", readPIDMax(""))
	}
	// The child's PID was reached: it was allocated in between.
	if before.NotReached(after, cmd.Process.Pid, readPIDMax("")) {
		t.Errorf("PID %d allocated between %+v and %+v, said not reached", cmd.Process.Pid, before, after)
	}
}
