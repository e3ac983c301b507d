// SPDX-License-Identifier: Apache-2.0

//go:build linux

package attribution

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// self is this test process's identity.
func self(t *testing.T) publisher.ProcessID {
	t.Helper()
	ticks, err := procstat.StartTicks("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return publisher.ProcessID{PID: os.Getpid(), StartTicks: ticks}
}

func th(tid int, source string, span byte, reason string) threadread.Thread {
	t := threadread.Thread{TID: tid, Source: source, Reason: reason}
	if span != 0 {
		t.Record = &threadctx.Record{SpanID: threadctx.SpanID{7: span}}
	}
	return t
}

// outcome is "records: tid source/span… unread: tid…".
func outcome(r SnapshotResult) string {
	var b strings.Builder
	b.WriteString("records:")
	for _, rec := range r.Records {
		fmt.Fprintf(&b, " %d %s/%x", rec.TID, rec.Source, rec.Record.SpanID[7])
	}
	b.WriteString(" unread:")
	for _, tid := range r.Unread {
		fmt.Fprintf(&b, " %d", tid)
	}
	return b.String()
}

// TestFromSnapshot: both sources merged per thread (an OTEP 4947 record
// wins, a DD record beats none); threads not read keep what they had
// (unread), threads with no context or sharing a slot are cut; with the
// OTEP 4947 snapshot failed, a thread without a DD record is unread; no
// snapshot is written for a PID that changed hands, or when nothing was
// read.
func TestFromSnapshot(t *testing.T) {
	id := self(t)
	at := time.Unix(50, 0)
	const o, d = publisher.SourceOTEP4947, publisher.SourceDD
	otep := []threadread.Thread{
		th(1, o, 0x11, ""), th(2, o, 0, threadread.ReasonNullPointer), th(3, o, 0, threadread.ReasonTimeout),
		th(4, o, 0x41, ""), th(5, o, 0, threadread.ReasonNotValid), th(6, o, 0, threadread.ReasonNullPointer),
	}
	dd := []threadread.Thread{
		th(1, d, 0x1d, ""), th(2, d, 0x2d, ""), th(3, d, 0, threadread.ReasonEmptySlot),
		th(5, d, 0, threadread.ReasonCollision), th(6, d, 0, threadread.ReasonStaleOwner),
		th(7, d, 0, threadread.ReasonInProgress), th(8, d, 0x8d, ""), th(9, d, 0, threadread.ReasonEmptySlot),
	}
	for _, tc := range []struct {
		name string
		s    Snapshot
		want string
		err  error
	}{
		{"both", Snapshot{ID: id, At: at, OTEP: otep, Slots: dd},
			"records: 1 otep4947/11 2 dd_otel_ctx/2d 4 otep4947/41 8 dd_otel_ctx/8d unread: 3 7", nil},
		{"otep only", Snapshot{ID: id, At: at, OTEP: otep}, "records: 1 otep4947/11 4 otep4947/41 unread: 3", nil},
		{"otep failed", Snapshot{ID: id, At: at, OTEPFailed: true, Slots: dd},
			"records: 1 dd_otel_ctx/1d 2 dd_otel_ctx/2d 8 dd_otel_ctx/8d unread: 3 5 6 7 9", nil},
		{"pid reused", Snapshot{ID: publisher.ProcessID{PID: id.PID, StartTicks: id.StartTicks + 1}, At: at, OTEP: otep}, "", ErrPIDReused},
		{"nothing read", Snapshot{ID: id, At: at, OTEPFailed: true}, "", ErrNothingRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := FromSnapshot(tc.s)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if got := outcome(r); got != tc.want {
				t.Errorf("%s\nwant %s", got, tc.want)
			}
			for _, rec := range r.Records {
				if rec.PID != id.PID || !rec.SeenAt.Equal(at) {
					t.Errorf("record %+v", rec)
				}
			}
			if want := len(threadread.Merge(tc.s.OTEP, tc.s.Slots)); len(r.Threads) != want {
				t.Errorf("%d merged threads, want %d", len(r.Threads), want)
			}
		})
	}
}

// TestDDSnapshotRealWriter: the slots of a real DD_OTEL_CTX writer read
// without stopping it: a thread alone in its slot gets its record, two
// threads sharing a slot are cut; once the writer is gone its identity is
// refused.
func TestDDSnapshotRealWriter(t *testing.T) {
	testenv.RequireRoot(t)
	w, busy, pair, _ := busyAndPair(t)
	ticks, err := procstat.StartTicks("/proc", w.PID)
	if err != nil {
		t.Fatal(err)
	}
	id := publisher.ProcessID{PID: w.PID, StartTicks: ticks}
	slots := ddslots.NewProcessReader("")
	threads, _, err := slots.Read(id, *ddBuffer(w.Buf, w.Capacity))
	if err != nil {
		t.Fatal(err)
	}
	r, err := FromSnapshot(Snapshot{ID: id, At: time.Now(), OTEPFailed: false, Slots: threads})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, rec := range r.Records {
		got = append(got, rec.TID)
		if rec.TID == busy && (rec.Record.TraceID.String() != "0af7651916cd43dd8448eb211c80319c" || rec.Source != publisher.SourceDD) {
			t.Errorf("busy worker's record %+v", rec)
		}
	}
	if !slices.Contains(got, busy) || slices.Contains(got, pair[0]) || slices.Contains(got, pair[1]) ||
		slices.Contains(r.Unread, pair[0]) || slices.Contains(r.Unread, pair[1]) {
		t.Errorf("records of %v, unread %v; busy %d, pair %v", got, r.Unread, busy, pair)
	}
	slots.Retain(map[publisher.ProcessID]bool{})
	if slots.Len() != 0 {
		t.Errorf("%d processes kept", slots.Len())
	}
	w.Kill()
	if _, err := FromSnapshot(Snapshot{ID: id, Slots: threads}); !errors.Is(err, ErrPIDReused) {
		t.Errorf("after the writer exited: %v", err)
	}
}

// busyAndPair starts a DD_OTEL_CTX writer (capacity 32) whose worker 0
// (busy) is alone in its slot and whose workers pair[0] and pair[1] share
// one, with records set: busy's 0x0af7…, the pair's two others. A busy
// worker that shares its slot with the main thread or the pair (about one
// start in ten) is an unlucky set-up, not a result: a new writer is
// started, a few times at most.
func busyAndPair(t *testing.T) (w *ddwriter.Writer, busy int, pair [2]int, mate ddwriter.Thread) {
	t.Helper()
	const tries = 8
	for range tries {
		w = ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 32, Threads: 2})
		w.Set(0, 0x0af7651916cd43dd, 0x8448eb211c80319c, 0xb7ad6b7169203331)
		mate, _ = w.Collide(1)
		w.Set(1, 0, 1, 2)
		w.Set(mate.Index, 0, 3, 4)
		busy, pair = w.Threads[0].TID, [2]int{w.Threads[1].TID, mate.TID}
		if !ddotel.Colliding([]int{w.PID, busy, pair[0], pair[1]}, 32)[busy] {
			return w, busy, pair, mate
		}
		t.Logf("set-up: worker %d shares its slot with the main thread or the pair: another writer", busy)
		w.Kill()
	}
	t.Fatalf("set-up: in %d writers worker 0 always shared its slot", tries)
	return nil, 0, [2]int{}, ddwriter.Thread{}
}
