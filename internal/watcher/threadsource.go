// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"sync"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// threadSource reads the thread contexts of the catalog's processes and
// writes them to the catalog, under the identity of the process it read
// (Catalog.UpdateThreadsFor, ObserveFor); thread_sampler chooses one
// (chooseThreads). It records its own telemetry; the watcher asks it only
// what the interface says.
type threadSource interface {
	// start starts its goroutines, counted in wg. They stop when ctx ends:
	// Shutdown cancels ctx and waits for wg.
	start(ctx context.Context, wg *sync.WaitGroup)
	// applied is called by the poll goroutine with the events of a round,
	// once they are in the catalog.
	applied(events []publisher.Event)
	// rescans are PIDs the source asks the poll goroutine to look at now
	// (nil: it never asks).
	rescans() <-chan int
	// current is where thread contexts are read now: a threadSources
	// value (otelcol_processctx_thread_context_source).
	current() string
}

// Values of otelcol_processctx_thread_context_source's source attribute:
// where thread contexts are read now.
const (
	sourceFentry   = sampler.MethodFentry  // at a followed profiler's samples, through fentry
	sourceHrtimer  = sampler.MethodHrtimer // the same, through its sampling timer
	sourceOwnTicks = "own_ticks"           // at the eBPF sampler's own ticks
	sourcePtrace   = "ptrace"              // by stopping threads (thread_sampler: ptrace)
	sourceOff      = "off"                 // nowhere: off, refused, or waiting for a profiler (follow)
)

var threadSources = []string{sourceFentry, sourceHrtimer, sourceOwnTicks, sourcePtrace, sourceOff}

// noThreads is the source of thread_sampler: off, and of auto when the
// kernel refuses the eBPF sampler: thread contexts are not read.
type noThreads struct{}

func (noThreads) start(context.Context, *sync.WaitGroup) {}
func (noThreads) applied([]publisher.Event)              {}
func (noThreads) rescans() <-chan int                    { return nil }
func (noThreads) current() string                        { return sourceOff }

// The ptrace snapshots: a goroutine takes one of every publisher each
// thread_context.interval; the rounds do not concern it.
func (t *ptraceReader) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.run(ctx)
	}()
}

func (*ptraceReader) applied([]publisher.Event) {}
func (*ptraceReader) rescans() <-chan int       { return nil }
func (*ptraceReader) current() string           { return sourcePtrace }

// The eBPF sampler follows the rounds (the kernel reads the catalog's
// processes) and asks for a rescan of a process that names a mapping
// with prctl.
func (t *samplerReader) applied(events []publisher.Event) { t.catalogEvents(events) }
func (t *samplerReader) rescans() <-chan int              { return t.rescan }

func (t *samplerReader) current() string {
	method, ownTicks := t.s.Following()
	switch {
	case method != "":
		return method
	case ownTicks:
		return sourceOwnTicks
	}
	return sourceOff
}

var (
	_ threadSource = noThreads{}
	_ threadSource = (*ptraceReader)(nil)
	_ threadSource = (*samplerReader)(nil)
)
