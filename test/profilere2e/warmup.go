// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// warmup: the spans that run before the measured ones, on a route the
// measurement ignores.
var warmup = []threadpub.RouteBusy{{Route: "/warmup", Busy: 100 * time.Millisecond}}

// maxWarmUps bounds warmUp's repeats (each waits two reports for samples).
const maxWarmUps = 8

// warmUp waits for the profiler's first report, then warms the publisher
// up. The profiler drops a process's first samples while it reads the
// process's mappings (the first seconds of the publisher's CPU time once
// it runs): 500 ms of spans of a route of their own, until the profiler
// has reported samples of the publisher, keep that out of the measured
// run (the links mode measures the start). They run on a worker of their
// own: threadpub numbers a run's span ids by worker and span index, so a
// measured worker's warm-up spans would share ids with its measured spans.
func warmUp(ctx context.Context, cfg *config, h *host, prof *proc, out *output, dir string) error {
	pub := h.pub
	if err := waitFor(ctx, "the profiler's first report", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, lines, _, _, _ := out.snapshot()
		return lines > 0, err
	}, h.col, prof); err != nil {
		return err
	}
	warm := time.Now()
	if _, err := pub.do(ctx, 10*time.Second, "threads 1"); err != nil {
		return err
	}
	// Once more while none of it is reported: a profiler that attached
	// 2.6 s after its start once reported no sample of the only warm-up,
	// and the run waited for samples that nothing more would cause.
	for i := 1; ; i++ {
		if _, err := pub.do(ctx, 10*time.Second, "switch %d 5 1 %s %s", cfg.workers, filepath.Join(dir, "warmup"), threadpub.RouteSpec(warmup)); err != nil {
			return err
		}
		if _, err := pub.do(ctx, 30*time.Minute, "wait %d", cfg.workers); err != nil {
			return err
		}
		err := waitFor(ctx, "the profiler's first samples of the publisher", 2*cfg.reporterInterval+5*time.Second, 200*time.Millisecond, func() (bool, error) {
			err := out.poll()
			evs, _, _, _, _ := out.snapshot()
			return len(evs) > 0, err
		}, h.col, prof)
		if err == nil {
			break
		}
		if !errors.Is(err, errNotWithin) || i == maxWarmUps {
			return fmt.Errorf("%w (after %d warm-ups)", err, i)
		}
	}
	warmEvents, _, _, _, _ := out.snapshot()
	h.logf("warm-up: 500 ms of %s; %d samples of the publisher reported %.1f s after it began", warmup[0].Route, len(warmEvents), time.Since(warm).Seconds())
	return nil
}
