// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"os"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestEnvironmentEntitiesAfterExec: a process named by its environment
// that execs a program with another OTEL_SERVICE_NAME (same PID, same start
// time) has its old service.instance deleted and the new one announced,
// once the catalog has seen the exec (within its 10 s stat period).
func TestEnvironmentEntitiesAfterExec(t *testing.T) {
	x := testenv.StartExecer(t, "PATH="+os.Getenv("PATH"), "OTEL_SERVICE_NAME=before")
	pid := x.Cmd.Process.Pid
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval, cfg.EventFormat, cfg.EnvironmentEntities = time.Hour, EventFormatLegacy, true
	sink, _ := startEnvReceiver(t, cfg, pid)

	named := func(eventType, service string) bool {
		for _, e := range findAny(sinkEvents(sink), pid, EventFormatLegacy, eventType, entityTypeServiceInst) {
			if e.res["service.name"] == service {
				return true
			}
		}
		return false
	}
	eventually(t, "the shell's service.instance (before)", func() bool { return named(entityevents.EventTypeState, "before") })
	x.Exec(t)
	testenv.EventuallyWithin(t, time.Minute, "the old service.instance deleted and the program's announced", func() bool {
		return named(entityevents.EventTypeDelete, "before") && named(entityevents.EventTypeState, "after")
	})
}
