// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

// TestDueQueueCompacts: processes announced again every round (updates)
// and processes lost leave stale repeat entries; the queue keeps at most
// one per live process plus dueSlack, and each live process's repeat stays
// queued for its due time.
func TestDueQueueCompacts(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	r := &processctxReceiver{cfg: cfg, lastState: map[publisher.ProcessID]time.Time{}}
	t0 := time.Unix(1000, 0)
	ids := []publisher.ProcessID{{PID: 1, StartTicks: 1}, {PID: 2, StartTicks: 2}, {PID: 3, StartTicks: 3}}
	for round := range 10000 {
		now := t0.Add(time.Duration(round) * time.Millisecond)
		for _, id := range ids {
			r.announced(id, now)
		}
		if round == 5000 {
			delete(r.lastState, ids[2]) // lost
			ids = ids[:2]
		}
		if limit := 2*len(r.lastState) + dueSlack + 1; len(r.due) > limit {
			t.Fatalf("round %d: %d queued repeats for %d processes, want at most %d", round, len(r.due), len(r.lastState), limit)
		}
	}
	due := map[publisher.ProcessID]bool{}
	for {
		d, ok := r.due.popDue(t0.Add(time.Hour + cfg.EntityInterval))
		if !ok {
			break
		}
		if r.live(d) {
			due[d.id] = true
		}
	}
	if len(due) != 2 || !due[ids[0]] || !due[ids[1]] {
		t.Fatalf("repeats due for %v, want the two live processes", due)
	}
}
