// SPDX-License-Identifier: Apache-2.0

// Package interleave times a benchmark's operation against a baseline run
// just before it in every iteration, so that both see the same load on a
// shared machine; the ratio is the figure to read (BENCHMARKS.md).
package interleave

import (
	"testing"
	"time"
)

// Timed sums the baseline's and the operation's times over a benchmark.
type Timed struct {
	base, op time.Duration
}

// Step runs base then op once.
func (t *Timed) Step(base, op func()) {
	t0 := time.Now()
	base()
	t1 := time.Now()
	op()
	t.op += time.Since(t1)
	t.base += t1.Sub(t0)
}

// Op is the operation's total time so far.
func (t *Timed) Op() time.Duration { return t.op }

// Report gives op's time per iteration (and per thread when threads > 0),
// the baseline's (named baseline-ns), and their ratio (x-baseline).
func (t *Timed) Report(b *testing.B, baseline string, threads int) {
	n := float64(b.N)
	b.ReportMetric(float64(t.op.Nanoseconds())/n, "op-ns")
	b.ReportMetric(float64(t.base.Nanoseconds())/n, baseline+"-ns")
	b.ReportMetric(float64(t.op)/float64(t.base), "x-"+baseline)
	if threads > 0 {
		b.ReportMetric(float64(t.op.Nanoseconds())/n/float64(threads), "ns/thread")
		b.ReportMetric(float64(t.op)/float64(t.base)/float64(threads), "x-"+baseline+"/thread")
		b.ReportMetric(float64(threads), "threads")
	}
}
