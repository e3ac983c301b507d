// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// ddFixtureCapacity is the slots of startDDFixture's buffer.
const ddFixtureCapacity = 32

// startDDFixture starts a ddwriter without a process context whose
// workers all spin on a CPU (so that a sampler sees them): worker 0
// publishes trace 0af7651916cd43dd8448eb211c80319c, span b7ad6b7169203331;
// worker 1 and shared, which share a slot, publish other contexts.
func startDDFixture(t *testing.T, libc ddwriter.Libc) (*ddwriter.Writer, ddwriter.Thread) {
	t.Helper()
	w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: ddFixtureCapacity, Threads: 2})
	w.Set(0, 0x0af7651916cd43dd, 0x8448eb211c80319c, 0xb7ad6b7169203331)
	shared, _ := w.Collide(1)
	w.Set(1, 0, 1, 2)
	w.Set(shared.Index, 0, 3, 4)
	for _, i := range []int{0, 1, shared.Index} {
		w.Busy(i)
	}
	return w, shared
}

// TestThreadsDD: otelctx threads shows the DD_OTEL_CTX records of a
// process that publishes no process context, whatever its executable, with
// their source, in JSON and as a table; threads sharing a slot show why
// they have no record; a hostile header fails with its reason.
func TestThreadsDD(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			w, shared := startDDFixture(t, libc)

			got, r := threadsJSON(t, w.PID)
			by := map[int]map[string]any{}
			for _, th := range got {
				by[int(th["tid"].(float64))] = th
			}
			if len(by) != 4 { // main + 3 workers
				t.Fatalf("%d threads: %s", len(by), r.stdout)
			}
			j, _ := json.Marshal(by[w.Threads[0].TID])
			want := `{"attributes":{},"source":"dd_otel_ctx","span_id":"b7ad6b7169203331","tid":` + strconv.Itoa(w.Threads[0].TID) +
				`,"trace_flags":0,"trace_id":"0af7651916cd43dd8448eb211c80319c"}`
			if string(j) != want {
				t.Errorf("busy worker:\n got %s\nwant %s", j, want)
			}
			for _, tid := range []int{w.Threads[1].TID, shared.TID} {
				if th := by[tid]; th["record"] != nil || th["reason"] != "collision" || th["source"] != "dd_otel_ctx" {
					t.Errorf("tid %d shares its slot: %v", tid, th)
				}
			}

			r = otelctx(t, "threads", strconv.Itoa(w.PID))
			if r.code != 0 || !strings.Contains(r.stdout, "SOURCE") || !strings.Contains(r.stdout, "dd_otel_ctx") ||
				!strings.Contains(r.stdout, "0af7651916cd43dd8448eb211c80319c") || !strings.Contains(r.stdout, "(no record: collision)") {
				t.Errorf("table (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
			}

			// A header announcing more slots than the mapping holds.
			w.Header(ddotel.Magic, 1, 0xffffffff, 32)
			r = otelctx(t, "threads", strconv.Itoa(w.PID))
			if r.code != 1 || !strings.Contains(r.stderr, "no process context") || !strings.Contains(r.stderr, "capacity out of bounds") ||
				strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("hostile header: exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
}

// TestBufferNotes: what otelctx threads says of the buffer searches
// (buffers.All) names the schema as the ring's writers do: nothing found
// is absent, a refused header or a failed read is not.
func TestBufferNotes(t *testing.T) {
	refusal := fmt.Errorf("%w (1 refused; first: %w)", ddscan.ErrNotFound, ddotel.ErrBadCapacity)
	searched := func(err error, refused bool) error {
		e := &bufferError{}
		e.add(ddotel.SchemaName, err, refused)
		return e
	}
	for _, tc := range []struct {
		err    error
		absent bool
		note   string
	}{
		{searched(ddscan.ErrNotFound, false), true, "no DD_OTEL_CTX buffer either"},
		{searched(refusal, true), false, "DD_OTEL_CTX: " + refusal.Error()},
		{searched(errors.New("slots unreadable"), false), false, "DD_OTEL_CTX: slots unreadable"},
	} {
		if got := bufferAbsent(tc.err); got != tc.absent {
			t.Errorf("%v: absent %v, want %v", tc.err, got, tc.absent)
		}
		if got := bufferNote(tc.err); got != tc.note {
			t.Errorf("%v: note %q, want %q", tc.err, got, tc.note)
		}
	}
	// A process without a buffer: every search finds nothing.
	e := &env{common: defaultCommon(), log: zap.NewNop()}
	if _, err := e.findBuffer(os.Getpid()); !bufferAbsent(err) || bufferNote(err) != "no DD_OTEL_CTX buffer either" {
		t.Errorf("own process: %v (%q)", err, bufferNote(err))
	}
}
