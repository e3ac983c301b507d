// SPDX-License-Identifier: Apache-2.0

//go:build linux

package conformance

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// samples collects what the sampler delivers; waiters are woken on each.
type samples struct {
	mu     sync.Mutex
	all    []sampler.Sample
	notify chan struct{}
}

func (c *samples) add(s sampler.Sample) {
	c.mu.Lock()
	c.all = append(c.all, s)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// first returns the first sample of tid that carries a record, if any.
func (c *samples) first(tid int) (sampler.Sample, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.all {
		if s.TID == tid && s.Record != nil {
			return s, true
		}
	}
	return sampler.Sample{}, false
}

// waitRecord waits, at most d, for a sample of tid with a record.
func (c *samples) waitRecord(tid int, d time.Duration) (sampler.Sample, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if s, ok := c.first(tid); ok {
			return s, true
		}
		select {
		case <-c.notify:
		case <-deadline.C:
			return c.first(tid)
		}
	}
}

// TestEBPFExecutableCells reads, with the eBPF sampler, every executable
// cell of the matrix: the variable in the executable's static TLS, found
// in .dynsym (dynamic, static PIE) or only in .symtab (plain -static,
// dynamic without -rdynamic). The kernel computes the slot from the same
// Location as the ptrace reader; the record it reads from a running
// worker must be the one the worker published.
func TestEBPFExecutableCells(t *testing.T) {
	samplertest.Require(t)
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	got := &samples{notify: make(chan struct{}, 1)}
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(got.add, nil) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var lines []string
	for _, cell := range threadpub.Matrix() {
		if cell.Where != threadpub.Exe {
			continue
		}
		t.Run(cell.String(), func(t *testing.T) {
			p := threadpub.Start(t, cell)
			p.Threads(1)
			tr := p.Set(0, record(0))
			loc, err := tlsvar.Resolve("/proc", p.PID)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			wantTable := tlsvar.SymbolTableDynsym
			if cell.SymtabOnly {
				wantTable = tlsvar.SymbolTableSymtab
			}
			wantPlacement := tlsvar.StaticTLS
			if cell.Libc == threadpub.Musl && !cell.Static && runtime.GOARCH == "arm64" {
				// musl on aarch64: start-up modules are read through the
				// DTV, which musl fills for every thread (tlsvar's
				// setMuslPlacement).
				wantPlacement = tlsvar.DynamicTLS
			}
			if loc.SymbolTable != wantTable || loc.Placement != wantPlacement {
				t.Fatalf("%v from %s; want %s from %s", loc, loc.SymbolTable, wantPlacement, wantTable)
			}
			if err := s.Track(p.PID, loc); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Untrack(p.PID); err != nil {
					t.Error(err)
				}
			}()
			// The perf event samples threads on a CPU: keep the worker
			// busy in bursts until one of its samples carries the record.
			var smp sampler.Sample
			ok := false
			for i := 0; i < 75 && !ok; i++ {
				p.Do("spin 0 200")
				smp, ok = got.waitRecord(tr.TID, 100*time.Millisecond)
			}
			if !ok {
				t.Fatalf("no sample of tid %d carried a record after ~15 s of spinning", tr.TID)
			}
			r, err := threadctx.Parse(smp.Record)
			if err != nil {
				t.Fatal(err)
			}
			want := record(0)
			if r.TraceID != threadctx.TraceID(want.TraceID) || r.SpanID != threadctx.SpanID(want.SpanID) || r.TraceFlags != want.Flags {
				t.Fatalf("sampled %s/%s/%d, published %x/%x/%d", r.TraceID, r.SpanID, r.TraceFlags, want.TraceID, want.SpanID, want.Flags)
			}
			lines = append(lines, fmt.Sprintf("%-40s ok  %s, tp%+d", cell, loc.SymbolTable, loc.TPOffset))
		})
	}
	sort.Strings(lines)
	t.Logf("eBPF executable cells:\n  %s", strings.Join(lines, "\n  "))
}
