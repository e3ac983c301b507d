// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/attribution"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/fakeproc"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// TestThreadsEBPFDD: otelctx threads --mode ebpf samples, with the real
// eBPF sampler, the DD_OTEL_CTX slots of a process that publishes no
// process context: a busy thread's runs carry its record with the source
// dd_otel_ctx; two busy threads sharing a slot are refused as collisions;
// the table shows the same; a hostile header fails on one line.
func TestThreadsEBPFDD(t *testing.T) {
	samplertest.Require(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			w, shared := startDDFixture(t, libc)
			busy, pair := w.Threads[0].TID, []int{w.Threads[1].TID, shared.TID}
			if c := ddotel.Colliding([]int{w.PID, busy, pair[0], pair[1]}, ddFixtureCapacity); c[busy] || !c[pair[0]] || !c[pair[1]] {
				t.Fatalf("setup: slots of main %d, busy %d, pair %v in %d slots: colliding %v", w.PID, busy, pair, ddFixtureCapacity, c)
			}

			seen := map[int]int{} // tid → runs
			sampleUntil(t, "the busy thread and the slot-sharing pair sampled", func() bool {
				r := otelctx(t, "threads", "--mode", "ebpf", "--duration", "1s", "--frequency", "997", "--json", strconv.Itoa(w.PID))
				if r.code != 0 {
					t.Fatalf("exit %d: %s", r.code, r.stderr)
				}
				checkDDRuns(t, r, busy, pair, seen)
				return seen[busy] > 0 && seen[pair[0]] > 0 && seen[pair[1]] > 0
			})

			// The table shows the same.
			sampleUntil(t, "a table with the busy thread's record and a collision", func() bool {
				r := otelctx(t, "threads", "--mode", "ebpf", "--duration", "200ms", "--frequency", "997", strconv.Itoa(w.PID))
				if r.code != 0 || !strings.Contains(r.stdout, "SOURCE") || !strings.Contains(r.stdout, "SAMPLES") {
					t.Fatalf("table (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
				}
				return strings.Contains(r.stdout, "dd_otel_ctx") && strings.Contains(r.stdout, "0af7651916cd43dd8448eb211c80319c") &&
					strings.Contains(r.stdout, "(no record: collision)")
			})

			// A header announcing more slots than the mapping holds: refused
			// before the sampler is loaded.
			w.Header(ddotel.Magic, 1, 0xffffffff, 32)
			r := otelctx(t, "threads", "--mode", "ebpf", "--duration", "10ms", strconv.Itoa(w.PID))
			if r.code != 1 || !strings.Contains(r.stderr, "no process context") || !strings.Contains(r.stderr, "capacity out of bounds") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stdout != "" {
				t.Errorf("hostile header: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
}

// sampleUntil runs sample (one run of the CLI's sampler, which checks what
// the run shows) until it says the threads it waits for were seen: a busy
// thread the loaded host did not schedule during one run is not an error.
func sampleUntil(t *testing.T, what string, sample func() bool) {
	t.Helper()
	testenv.EventuallyCPU(t, what, sample)
}

// checkDDRuns checks each run of r (TestThreadsEBPFDD's fixture) and
// counts the runs of each thread in seen.
func checkDDRuns(t *testing.T, r result, busy int, pair []int, seen map[int]int) {
	t.Helper()
	for _, run := range jsonRows(t, r) {
		tid := int(run["tid"].(float64))
		seen[tid]++
		if run["source"] != publisher.SourceDD || run["samples"].(float64) < 1 ||
			run["last_unix_nano"].(float64) < run["time_unix_nano"].(float64) {
			t.Errorf("run %v", run)
		}
		switch tid {
		case busy:
			j, _ := json.Marshal(map[string]any{"trace_id": run["trace_id"], "span_id": run["span_id"], "trace_flags": run["trace_flags"], "reason": run["reason"]})
			if want := `{"reason":null,"span_id":"b7ad6b7169203331","trace_flags":0,"trace_id":"0af7651916cd43dd8448eb211c80319c"}`; string(j) != want {
				t.Errorf("busy thread's run: %s, want %s", j, want)
			}
		case pair[0], pair[1]:
			if _, ok := run["record"]; !ok || run["record"] != nil || run["reason"] != threadread.ReasonCollision ||
				!strings.Contains(fmt.Sprint(run["error"]), "slot shared") {
				t.Errorf("tid %d shares its slot: %v", tid, run)
			}
		}
	}
}

// runsOf is what the runs say, "tid source what×samples" per run, in order.
func runsOf(runs []sampleRun) []string {
	var out []string
	for _, r := range runs {
		what := r.Reason
		if r.Record != nil {
			what = r.Record.SpanID.String()
		}
		out = append(out, fmt.Sprintf("%d %s %s×%d", r.TID, r.Source, what, r.samples))
	}
	return out
}

func checkRuns(t *testing.T, got []sampleRun, want []string) {
	t.Helper()
	g := runsOf(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("runs:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// TestDDJudge: how --mode ebpf judges the DD samples the kernel emits,
// against the thread listings before and after each (a fake procfs, so the
// threads are exactly these): a thread alone in its slot shows its slot;
// one sharing it with a thread of either listing is a collision; a new
// owner of a slot still holding its exited predecessor's value is a stale
// owner until it writes; a thread in neither listing collides with a
// listed one of its slot and is trusted in a free slot.
func TestDDJudge(t *testing.T) {
	root := t.TempDir()
	const pid, capacity = 100, 16 // slots: 100 → 4, 101, 117, 133 → 5, 150 → 6
	fakeproc.Tasks(t, root, pid, 100, 101)
	b, p, err := newRunBuilder(attribution.Config{ID: publisher.ProcessID{PID: pid}, Buffer: &publisher.Buffer{Schema: ddring.Schema.Name(), Addr: 0x1000, Capacity: capacity},
		ProcRoot: root, Now: stillClock})
	if err != nil {
		t.Fatal(err)
	}
	v, w := ddotel.Slot{TraceIDLow: 1, SpanID: 0xa}, ddotel.Slot{TraceIDLow: 3, SpanID: 0xb}
	n := 0
	dd := func(tid int, s ddotel.Slot) sampler.Sample {
		n++
		return sampler.Sample{PID: pid, TID: tid, SlotTID: tid, Time: time.Unix(0, int64(n)), Read: sampler.ReadBufferSlot, Slot: s}
	}
	batch := func(smps ...sampler.Sample) {
		for _, smp := range smps {
			p.Add(smp)
		}
		p.Flush() // lists the threads, as Add does every attribution.DefaultListEvery
	}
	// Another process's sample is ignored.
	p.Add(sampler.Sample{PID: pid + 1, TID: 101, SlotTID: 101, Read: sampler.ReadBufferSlot, Slot: w})
	batch(dd(101, v))                           // alone in slot 5
	fakeproc.Tasks(t, root, pid, 100, 101, 117) // 117 starts in slot 5
	batch(dd(101, v), dd(117, v))
	fakeproc.Tasks(t, root, pid, 100, 117) // 101 exits
	batch(dd(117, v))                      // 101 was in the listing before
	batch(dd(117, v))                      // alone now, and the slot holds 101's value
	batch(dd(117, w))                      // it wrote
	batch(dd(133, w))                      // in neither listing, slot 5 is 117's
	batch(dd(150, w))                      // in neither listing, slot 6 is free
	batch(dd(100, ddotel.Slot{}))
	p.Finish()
	checkRuns(t, b.runs, []string{
		"101 dd_otel_ctx 000000000000000a×1",
		"101 dd_otel_ctx collision×1",
		"117 dd_otel_ctx collision×2",
		"117 dd_otel_ctx stale owner×1",
		"117 dd_otel_ctx 000000000000000b×1",
		"133 dd_otel_ctx collision×1",
		"150 dd_otel_ctx 000000000000000b×1",
		"100 dd_otel_ctx empty slot×1",
	})
	if held, _ := p.Waiting(); held != 0 || p.SlotsKnown() == 0 {
		t.Errorf("held %d samples; %d slots remembered", held, p.SlotsKnown())
	}
}

// stillClock is a clock that does not move: the judge lists the threads
// only when a test calls Flush.
func stillClock() time.Time { return time.Unix(0, 0) }

// otepRecord is a valid OTEP 4947 record (header only) with span id span.
func otepRecord(span byte) []byte {
	b := make([]byte, threadctx.HeaderSize)
	b[15], b[23], b[24] = 1, span, 1 // trace id …01, span id …span, valid; no attributes
	return b
}

// TestRunBuilderBothSources: a process read through both sources gives an
// OTEP 4947 sample, then a DD one, per capture; they count as one sample
// and merge as in the snapshot (an OTEP 4947 record wins, a DD record
// beats no OTEP 4947 record); a capture missing one source keeps what
// that source showed last.
func TestRunBuilderBothSources(t *testing.T) {
	root := t.TempDir()
	const pid, tid = 200, 201
	fakeproc.Tasks(t, root, pid, pid, tid)
	b, p, err := newRunBuilder(attribution.Config{ID: publisher.ProcessID{PID: pid}, Variable: &otep4947.Schema, Buffer: &publisher.Buffer{Schema: ddring.Schema.Name(), Addr: 0x1000, Capacity: 64},
		ProcRoot: root, Now: stillClock})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	otep := func(rec []byte) sampler.Sample {
		n++
		return sampler.Sample{PID: pid, TID: tid, Time: time.Unix(0, int64(n)), Read: sampler.ReadVariable, Record: rec}
	}
	dd := func(span uint64) sampler.Sample {
		n++
		return sampler.Sample{PID: pid, TID: tid, SlotTID: tid, Time: time.Unix(0, int64(n)), Read: sampler.ReadBufferSlot, Slot: ddotel.Slot{TraceIDLow: 7, SpanID: span}}
	}
	for _, smp := range []sampler.Sample{
		otep(nil), dd(0xd1), // no OTEP 4947 record: the DD one
		otep(nil), dd(0xd1),
		otep(otepRecord(0xe1)), dd(0xd1), // the OTEP 4947 record wins
		otep(otepRecord(0xe1)), // its DD sample not emitted (slot being written)
		otep(otepRecord(0xe1)), dd(0xd1),
		dd(0xd2),            // the OTEP 4947 read failed: it still has its record
		otep(nil), dd(0xd2), // withdrawn: the DD record
	} {
		p.Add(smp)
	}
	p.Flush()
	p.Add(otep(nil)) // the last capture's DD sample never came
	p.Finish()
	checkRuns(t, b.runs, []string{
		"201 dd_otel_ctx 00000000000000d1×2",
		"201 otep4947 00000000000000e1×4",
		"201 dd_otel_ctx 00000000000000d2×2",
	})
	if first, last := b.runs[1].first.UnixNano(), b.runs[1].last.UnixNano(); first != 5 || last != 10 {
		t.Errorf("OTEP 4947 run from %d to %d, want its captures' first samples 5 to 10", first, last)
	}
}
