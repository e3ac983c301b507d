// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/proc/remote"
)

// A poll round has a time budget, RoundBudgetTimeouts read timeouts. A
// publisher can make each read of it slow without making any time out (its
// mmap lock held 0.9 s at a time, a FUSE READ answered just before the read
// timeout): fifty such publishers would cost a round 45 s. So each tracked
// publisher has a share of the budget (the budget over the publishers
// polled, at least a quarter of the read timeout): one whose poll costs
// more is quarantined (ErrRoundBudget: reads_failed{reason=round_budget},
// logged with its PID) and not polled for a backoff, doubling with each
// overrun; and once the round has spent its budget, the publishers not
// polled yet wait for the next round. The rest of the round goes on.

// ErrRoundBudget: the publisher's poll cost a round more than its share.
var ErrRoundBudget = errors.New("the poll of the process cost more than its share of the round's time budget")

// RoundBudgetTimeouts is a poll round's budget in read timeouts: half of
// the 32 the watcher's stall_timeout must stay above, the rest left to
// discovery's reads.
const RoundBudgetTimeouts = 16

const (
	overrunMin = 10 * time.Second
	overrunMax = 10 * time.Minute
)

// overrun is a tracked publisher's quarantine after it overran its share.
type overrun struct {
	until   time.Time
	backoff time.Duration
}

// roundBudget is one poll round's clock.
type roundBudget struct {
	start  time.Time
	budget time.Duration
	share  time.Duration
	stop   *atomic.Bool // the scanner's Interrupt: the round ends now
}

func (s *Scanner) newRoundBudget(n int) roundBudget {
	timeout := remote.ReadTimeout()
	b := roundBudget{start: time.Now(), budget: RoundBudgetTimeouts * timeout, stop: &s.stopping}
	b.share = max(b.budget/time.Duration(max(n, 1)), timeout/4)
	return b
}

// spent: the round has used its budget.
func (b *roundBudget) spent() bool { return b.stop.Load() || since(b.start) >= b.budget }

// since is time.Since: the budget is the host's time, whatever clock
// Options.Now is (tests replace it to make every poll look slow).
var since = time.Since

// quarantinedByBudget: t overran its share lately, and is not polled (by
// a round, nor by a poll a prctl event asks for).
func (s *Scanner) quarantinedByBudget(t *tracked) bool {
	return t.overrun != nil && time.Now().Before(t.overrun.until)
}

// chargeRound quarantines t if its poll, begun at start, took more than its
// share; it reports whether it did.
func (s *Scanner) chargeRound(b *roundBudget, t *tracked, start time.Time, st *Stats) bool {
	took := since(start)
	if took <= b.share {
		if t.overrun != nil && !time.Now().Before(t.overrun.until) && took < b.share/2 {
			t.overrun = nil // well-behaved again: its history is forgotten
		}
		return false
	}
	if t.overrun == nil {
		t.overrun = &overrun{}
	}
	t.overrun.backoff = min(max(2*t.overrun.backoff, overrunMin), overrunMax)
	t.overrun.until = time.Now().Add(t.overrun.backoff)
	err := fmt.Errorf("pid %d: poll took %v, share %v of the round's %v: %w",
		t.pid, took.Round(time.Millisecond), b.share.Round(time.Millisecond), b.budget, ErrRoundBudget)
	st.fail(err)
	s.opt.Logger.Warn("a publisher costs poll rounds more than its share of their time budget: not polled for a while",
		zap.Int("pid", t.pid), zap.Duration("took", took), zap.Duration("share", b.share),
		zap.Duration("quarantine", t.overrun.backoff), zap.Error(err))
	return true
}
