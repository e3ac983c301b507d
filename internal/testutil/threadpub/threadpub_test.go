// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadpub_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// TestProcessContext: the publisher's OTEP 4719 context carries the
// thread-local reference data a thread-context reader checks first.
func TestProcessContext(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		t.Run(string(l), func(t *testing.T) {
			p := threadpub.Start(t, threadpub.Cell{Libc: l, Where: threadpub.SharedLib})
			ms, err := procmaps.FindNamed("/proc", p.PID, "OTEL_CTX", nil)
			if err != nil || len(ms) != 1 {
				t.Fatalf("OTEL_CTX mappings %v, %v", ms, err)
			}
			raw, _, err := processctx.ReadRaw(remote.Memory{PID: p.PID}, ms[0].Start, 65536, processctx.DefaultAttempts, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, _, err := processctx.Decode(raw.Payload, processctx.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if ctx.ThreadLocal.SchemaVersion != threadpub.SchemaVersion || !slices.Equal(ctx.ThreadLocal.AttributeKeyMap, threadpub.KeyMap) {
				t.Fatalf("thread-local data %+v", ctx.ThreadLocal)
			}
		})
	}
}

// TestNoContext: --no-context publishes no process context.
func TestNoContext(t *testing.T) {
	testenv.RequireRoot(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, NoContext: true})
	ms, err := procmaps.FindNamed("/proc", p.PID, "OTEL_CTX", nil)
	if err != nil || len(ms) != 0 {
		t.Fatalf("OTEL_CTX mappings %v, %v", ms, err)
	}
}

// TestCellNames: names are unique across the matrix (they name subtests
// and build directories).
func TestCellNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range threadpub.Matrix() {
		if seen[c.String()] || strings.Contains(c.String(), " ") {
			t.Fatalf("cell name %q repeated or with a space", c)
		}
		seen[c.String()] = true
	}
	// Per writer: libc × where × dialect, 2 static PIE, 2 × 2 .symtab-only.
	if len(seen) != 2*(2*4*2+2+4) {
		t.Fatalf("%d cells", len(seen))
	}
}

// TestSwitchTruth: two workers switch spans concurrently and report
// contiguous, non-overlapping spans of the requested length, in both
// clocks, ending with the withdrawal; crowd runs and reports its times.
func TestSwitchTruth(t *testing.T) {
	testenv.RequireRoot(t)
	for _, w := range []threadpub.Writer{threadpub.PointerSwap, threadpub.ValidFlip} {
		t.Run(w.String(), func(t *testing.T) {
			p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Writer: w})
			p.Threads(2)
			dir := t.TempDir()
			paths := []string{dir + "/0", dir + "/1"}
			tids := []int{p.Switch(0, 5, 10, paths[0]), p.Switch(1, 3, 20, paths[1])}
			p.Wait(0)
			p.Wait(1)
			if tids[0] == tids[1] || tids[0] <= 0 {
				t.Fatalf("tids %v", tids)
			}
			for k, n := range []int{5, 3} {
				truth, err := threadpub.ReadSwitchTruth(paths[k])
				if err != nil {
					t.Fatal(err)
				}
				if len(truth.Spans) != n {
					t.Fatalf("worker %d: %d spans", k, len(truth.Spans))
				}
				for i, s := range truth.Spans {
					ms := []int{10, 20}[k]
					// The wall-clock bounds are read just after the boot-time
					// ones: their difference may be short by that gap.
					if d, r := s.BootEnd-s.BootStart, s.RealEnd-s.RealStart; d < uint64(ms)*1e6 || r < int64(ms)*1e6-100_000 {
						t.Errorf("worker %d span %d lasted %d ns (boot), %d ns (real)", k, i, d, r)
					}
					if i > 0 && s.BootStart < truth.Spans[i-1].BootEnd {
						t.Errorf("worker %d: span %d starts before span %d ends", k, i, i-1)
					}
					if s.SpanID != strings.Repeat("0", 7)+string(rune('1'+k))+strings.Repeat("0", 7)+string(rune('1'+i)) {
						t.Errorf("worker %d span %d: span id %s", k, i, s.SpanID)
					}
				}
				if truth.DoneBoot < truth.Spans[n-1].BootEnd {
					t.Errorf("worker %d: done before the last span's end", k)
				}
			}
			wall, cpu := p.Crowd(8, 1_000_000, 1000)
			if wall <= 0 || cpu <= 0 {
				t.Errorf("crowd: wall %v cpu %v", wall, cpu)
			}
		})
	}
}
