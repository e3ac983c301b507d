// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
)

// threadpub's default rounds make 2 % three standard deviations of every
// route's share (the smallest, /login, at exactly that; 20 rounds made it
// under one); a node kind keeps its 20 a worker; -rounds wins.
func TestMixRounds(t *testing.T) {
	cfg := &config{workers: 2}
	if got := mixRounds(cfg, 997, false); got != 203 {
		t.Errorf("threadpub at 997 Hz, 2 workers: %d rounds, want 203", got)
	}
	for _, rounds := range []int{203, 20} {
		n := float64(rounds) * 2 * roundSeconds() * 997
		sigma := cputimetruth.ShareSigma(smallestShare(), n)
		if fits := 3*sigma <= cputimetruth.RouteShareTolerance; fits != (rounds == 203) {
			t.Errorf("%d rounds: /login's σ %.3f %%, 3σ within 2 %%: %v", rounds, 100*sigma, fits)
		}
	}
	if got := mixRounds(cfg, 997, true); got != nodeRoundsPerWorker {
		t.Errorf("node at 997 Hz: %d rounds a worker, want %d", got, nodeRoundsPerWorker)
	}
	cfg.rounds = 7
	if a, b := mixRounds(cfg, 997, false), mixRounds(cfg, 997, true); a != 7 || b != 7 {
		t.Errorf("-rounds 7: %d, %d", a, b)
	}
}
