package catalog

import (
	"slices"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
)

func TestKnown(t *testing.T) {
	c := New()
	now := time.Now()
	c.now = func() time.Time { return now }
	live := &scan.Process{ID: scan.ProcessID{PID: 10, StartTicks: 1}}
	gone := &scan.Process{ID: scan.ProcessID{PID: 20, StartTicks: 1}}
	c.Apply([]scan.Event{{Kind: scan.Found, Process: live}, {Kind: scan.Found, Process: gone}})
	c.Apply([]scan.Event{{Kind: scan.Lost, Process: gone}})
	pids := []int64{10, 20, 30, -1, 1<<32 + 10}
	known := make([]bool, len(pids))
	c.Known(pids, known)
	if want := []bool{true, true, false, false, false}; !slices.Equal(known, want) {
		t.Errorf("known %v, want %v", known, want)
	}
}
