// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelctx/otelctx/internal/proc/remote"
	pub "github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
)

// budgetWarning is the scanner's warning naming a publisher over its share.
const budgetWarning = "a publisher costs poll rounds more than its share of their time budget: not polled for a while"

// TestSlowMmapLockRoundBudget is the slow variant of issue 46: many
// publishers each hold their own mmap lock again and again, each time a
// little less than read_timeout (a FUSE file system served by the test
// answers each READ after 0.9 x read_timeout: hostile.c slowlock), so no
// read of them times out but each poll of them waits. A poll round costs
// at most its budget (RoundBudgetTimeouts x read_timeout) and one poll:
// every tracked publisher is accounted for as polled, postponed to the
// next round or quarantined for overrunning its share; each overrun is
// counted (reads_failed{reason=round_budget}) and named (a warning with
// its PID), and only slow publishers are named. A well-behaved publisher
// started meanwhile is found.
func TestSlowMmapLockRoundBudget(t *testing.T) {
	testenv.RequireRoot(t)
	const n = 40
	// A shorter read timeout than the default keeps the test short; the
	// budget and the shares scale with it.
	readTimeout := 400 * time.Millisecond
	remote.SetReadTimeout(readTimeout)
	t.Cleanup(func() { remote.SetReadTimeout(0) })
	budget := scan.RoundBudgetTimeouts * readTimeout

	fs := testfuse.Mount(t, make([]byte, n<<16)) // a page every 64 KiB per publisher
	core, logs := observer.New(zapcore.WarnLevel)
	ours := map[int]bool{}
	// Once armed, each round's first reading of the clock says it began.
	var armed atomic.Bool
	began := make(chan struct{}, 1)
	s, err := scan.New(scan.Options{
		Now: func() time.Time {
			if armed.Load() {
				select {
				case began <- struct{}{}:
				default:
				}
			}
			return time.Now()
		},
		Logger: zap.New(core),
		Filter: func(pid int, _ string) bool { return ours[pid] },
		// Nothing is looked at again by chance during the test.
		RecheckMin: time.Hour, RecheckMax: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	var slow []*hostile
	for range n {
		h := startHostile(t)
		ours[h.PID] = true
		slow = append(slow, h)
	}
	b := startHostile(t) // well-behaved
	ours[b.PID] = true
	found := map[int]bool{}
	eventually(t, "every publisher found", func() bool {
		evs, _, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Kind == pub.Found {
				found[e.Process.ID.PID] = true
			}
		}
		return len(found) == n+1
	})

	fs.AnswerAfter(readTimeout * 9 / 10)
	slowPIDs := map[int]bool{}
	for i, h := range slow {
		h.Do("slowlock %s %d", fs.Path(), i<<16)
		slowPIDs[h.PID] = true
	}
	eventually(t, "every slow publisher faulting on its FUSE page again and again", func() bool {
		for _, h := range slow {
			if len(fs.ReadsBy(h.PID)) < 2 {
				return false
			}
		}
		return true
	})

	var overruns, postponed int
	for round := range 3 {
		_, st, err := s.Poll()
		if err != nil {
			t.Fatal(err)
		}
		overruns += st.Failures[scan.ReasonRoundBudget]
		postponed += st.Postponed
		t.Logf("round %d: %v (budget %v), %d polled, %d postponed, %d quarantined for overrunning, %d overruns, %d stalled",
			round, st.Duration, budget, st.Polled, st.Postponed, st.Overran,
			st.Failures[scan.ReasonRoundBudget], st.Failures[scan.ReasonStalled])
		if got := st.Polled + st.Postponed + st.Overran; got != n+1 {
			t.Errorf("round %d: %d polled + %d postponed + %d quarantined = %d, want every one of the %d tracked",
				round, st.Polled, st.Postponed, st.Overran, got, n+1)
		}
		// A hang bound, not a performance threshold: the budget, plus the
		// poll begun before it was spent (its reads, each bounded by the
		// read timeout). Unbounded, 40 slow publishers cost a round
		// 40 waits of up to 0.9 x read_timeout for each of their reads.
		if limit := budget + 8*readTimeout; st.Duration > limit {
			t.Errorf("round %d took %v, over its budget %v and one poll (%v)", round, st.Duration, budget, limit)
		}
	}
	if overruns == 0 {
		t.Fatalf("no round_budget overrun counted in 3 rounds of %d slow publishers", n)
	}

	var named []int
	for _, e := range logs.FilterMessage(budgetWarning).All() {
		pid := int(e.ContextMap()["pid"].(int64))
		named = append(named, pid)
		if !slowPIDs[pid] {
			t.Errorf("publisher %d named over its share, but it never held its mmap lock", pid)
		}
	}
	if len(named) != overruns {
		t.Errorf("%d overruns counted, %d named in warnings", overruns, len(named))
	}
	slices.Sort(named)
	t.Logf("%d overruns, %d postponed polls; publishers named: %v", overruns, postponed, slices.Compact(named))

	c := startHostile(t) // started while the slow publishers hold their locks
	ours[c.PID] = true
	eventually(t, "a publisher started afterwards found", func() bool {
		evs, _, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(evs, func(e pub.Event) bool { return e.Kind == pub.Found && e.Process.ID.PID == c.PID })
	})

	// Interrupt (the watcher's Shutdown) ends a round at its next
	// publisher: slow publishers cannot hold the collector's exit for the
	// round's budget.
	armed.Store(true)
	done := make(chan scan.Stats, 1)
	go func() {
		_, st, _ := s.Poll()
		done <- st
	}()
	<-began
	s.Interrupt()
	select {
	case st := <-done:
		// A hang bound: the publisher being read when Interrupt came, and
		// a few more on a loaded machine, not a round's worth.
		if st.Polled > 5 {
			t.Errorf("the round interrupted as it began read %d publishers (%d postponed)", st.Polled, st.Postponed)
		}
		t.Logf("interrupted round: %v, %d polled, %d postponed, %d quarantined", st.Duration, st.Polled, st.Postponed, st.Overran)
	case <-time.After(4 * budget):
		t.Fatalf("an interrupted round still running after %v", 4*budget)
	}
}
