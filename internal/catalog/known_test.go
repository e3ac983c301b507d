// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"slices"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

func TestKnown(t *testing.T) {
	c := New()
	now := time.Now()
	c.now = func() time.Time { return now }
	live := &publisher.Process{ID: publisher.ProcessID{PID: 10, StartTicks: 1}}
	gone := &publisher.Process{ID: publisher.ProcessID{PID: 20, StartTicks: 1}}
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: live}, {Kind: publisher.Found, Process: gone}})
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: gone}})
	pids := []int64{10, 20, 30, -1, 1<<32 + 10}
	known := make([]bool, len(pids))
	c.Known(pids, known)
	if want := []bool{true, true, false, false, false}; !slices.Equal(known, want) {
		t.Errorf("known %v, want %v", known, want)
	}
}
