// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package threadsource reads the thread contexts of the catalog's
// processes and writes them to the catalog: the eBPF sampler (EBPF), ptrace
// snapshots (Ptrace) or nothing (None), as thread_sampler chooses (New).
// The watcher runs one and hands it the rounds' events; each records its
// own telemetry.
package threadsource

import (
	"context"
	"sync"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Source reads the thread contexts of the catalog's processes and writes
// them under the identity of the process it read (Catalog.UpdateThreadsFor,
// ObserveFor).
type Source interface {
	// Start starts its goroutines, counted in wg. They stop when ctx ends:
	// the watcher's Shutdown cancels ctx and waits for wg.
	Start(ctx context.Context, wg *sync.WaitGroup)
	// Applied is called by the poll goroutine with the events of a round,
	// once they are in the catalog.
	Applied(events []publisher.Event)
	// Rescans are PIDs the source asks the poll goroutine to look at now
	// (nil: it never asks).
	Rescans() <-chan int
	// Current is where thread contexts are read now: one of Places
	// (otelcol_processctx_thread_context_source).
	Current() string
}

// Values of otelcol_processctx_thread_context_source's source attribute:
// where thread contexts are read now.
const (
	AtFentry   = sampler.MethodFentry  // at a followed profiler's samples, through fentry
	AtHrtimer  = sampler.MethodHrtimer // the same, through its sampling timer
	AtOwnTicks = "own_ticks"           // at the eBPF sampler's own ticks
	AtPtrace   = "ptrace"              // by stopping threads (thread_sampler: ptrace)
	AtNowhere  = "off"                 // nowhere: off, refused, or waiting for a profiler (follow)
)

// Places are the values of Current.
var Places = []string{AtFentry, AtHrtimer, AtOwnTicks, AtPtrace, AtNowhere}

// None is the source of thread_sampler: off, and of auto when the kernel
// refuses the eBPF sampler: thread contexts are not read.
type None struct{}

func (None) Start(context.Context, *sync.WaitGroup) {}
func (None) Applied([]publisher.Event)              {}
func (None) Rescans() <-chan int                    { return nil }
func (None) Current() string                        { return AtNowhere }

var (
	_ Source = None{}
	_ Source = (*Ptrace)(nil)
	_ Source = (*EBPF)(nil)
)
