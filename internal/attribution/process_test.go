// SPDX-License-Identifier: Apache-2.0

//go:build linux

package attribution

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/fakeproc"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// clock is a test clock: listings are due only when a test moves it.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// recorder keeps the observations a Process delivers.
type recorder struct {
	id  publisher.ProcessID
	obs []Observation
}

func (r *recorder) observe(id publisher.ProcessID, o Observation) {
	if id != r.id {
		panic(fmt.Sprintf("observation for %v, want %v", id, r.id))
	}
	r.obs = append(r.obs, o)
}

// summary is "tid source what" per observation, what being the span id, or
// the reason (refused ones prefixed "refused:"), then "exact" if it is.
func (r *recorder) summary() []string {
	var out []string
	for _, o := range r.obs {
		what := o.Reason
		switch {
		case o.Record != nil:
			what = o.Record.Record.SpanID.String()
			if o.Record.Source != o.Source || o.Record.TID != o.TID || o.Record.PID != r.id.PID || !o.Record.SeenAt.Equal(o.Time) {
				what += " (inconsistent record)"
			}
		case o.Refused():
			what = "refused:" + what
		}
		if o.Exact {
			what += " exact"
		}
		out = append(out, fmt.Sprintf("%d %s %s", o.TID, o.Source, what))
	}
	r.obs = nil
	return out
}

func check(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if got := r.summary(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("observations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// ddBuffer is a DD_OTEL_CTX buffer as discovery finds it.
func ddBuffer(addr uint64, capacity uint32) *publisher.Buffer {
	return &publisher.Buffer{Schema: ddring.Schema.Name(), Addr: addr, Capacity: capacity}
}

// newTest returns a Process for cfg (Observe, Now and ProcRoot set to the
// returned recorder, clock and cfg's root) and its recorder and clock.
func newTest(t *testing.T, cfg Config) (*Process, *recorder, *clock) {
	t.Helper()
	r := &recorder{id: cfg.ID}
	c := &clock{t: time.Unix(1000, 0)}
	cfg.Observe, cfg.Now = r.observe, c.now
	p, err := NewProcess(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, r, c
}

// otepRecord is a valid OTEP 4947 record with span id …span and the given
// attributes (key index, value).
func otepRecord(span byte, attrs ...any) []byte {
	b := make([]byte, 28)
	b[15], b[23], b[24] = 1, span, 1 // trace id …01, span id, valid
	var data []byte
	for i := 0; i+1 < len(attrs); i += 2 {
		v := attrs[i+1].(string)
		data = append(data, byte(attrs[i].(int)), byte(len(v)))
		data = append(data, v...)
	}
	binary.NativeEndian.PutUint16(b[26:], uint16(len(data)))
	return append(b, data...)
}

// samples makes samples of pid numbered in time (1 ns apart) and order.
type samples struct {
	pid int
	n   int64
}

func (s *samples) next() time.Time { s.n++; return time.Unix(0, s.n) }

func (s *samples) otep(tid int, rec []byte) sampler.Sample {
	return sampler.Sample{PID: s.pid, TID: tid, Time: s.next(), Read: sampler.ReadVariable, Record: rec}
}

func (s *samples) dd(tid int, slot ddotel.Slot) sampler.Sample {
	return sampler.Sample{PID: s.pid, TID: tid, SlotTID: tid, Time: s.next(), Read: sampler.ReadBufferSlot, Slot: slot}
}

// TestOTEPSample: one OTEP 4947 sample of a process read through that
// source alone is one observation, at once: a record named through the key
// map; no context for a NULL slot, an unallocated TLS block or a record
// not valid; refused for a record too short to parse.
func TestOTEPSample(t *testing.T) {
	const pid, tid = 300, 301
	notValid := otepRecord(9)
	notValid[24] = 0
	for _, tc := range []struct {
		name string
		smp  sampler.Sample
		want string
	}{
		{"record", sampler.Sample{Record: otepRecord(7, 0, "GET /")}, "301 otep4947 0000000000000007"},
		{"followed", sampler.Sample{Record: otepRecord(7), Followed: true}, "301 otep4947 0000000000000007 exact"},
		{"null pointer", sampler.Sample{}, "301 otep4947 " + threadread.ReasonNullPointer},
		{"not allocated", sampler.Sample{NotAllocated: true}, "301 otep4947 " + threadread.ReasonNotAllocated},
		{"not valid", sampler.Sample{Record: notValid}, "301 otep4947 " + threadread.ReasonNotValid},
		{"short", sampler.Sample{Record: otepRecord(7)[:10]}, "301 otep4947 refused:" + ReasonParse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: pid, StartTicks: 5}, Variable: &otep4947.Schema, KeyMap: []string{"http.route"}})
			smp := tc.smp
			smp.PID, smp.TID, smp.Read, smp.Time = pid, tid, sampler.ReadVariable, time.Unix(0, 1)
			p.Add(smp)
			if tc.name == "record" && len(r.obs) == 1 && r.obs[0].Record != nil {
				if got := r.obs[0].Record.Attributes; len(got) != 1 || got["http.route"] != "GET /" {
					t.Errorf("attributes %v", got)
				}
			}
			check(t, r, tc.want)
		})
	}
}

// TestSchemaSources: each read's observations carry its schema's source
// (the registry's, for the buffer); a buffer of a schema the registry does
// not know, or one not sampled as slots, is refused.
func TestSchemaSources(t *testing.T) {
	root := t.TempDir()
	fakeproc.Tasks(t, root, 600, 601)
	variable := testSchema{}
	p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: 600}, Variable: variable, ProcRoot: root})
	s := &samples{pid: 600}
	p.Add(s.otep(601, otepRecord(3)))
	check(t, r, "601 test-source 0000000000000003")
	p, r, c := newTest(t, Config{ID: publisher.ProcessID{PID: 600}, Buffer: ddBuffer(0x1000, 8), ProcRoot: root})
	p.Add(s.dd(601, ddotel.Slot{TraceIDLow: 1, SpanID: 4}))
	c.t = c.t.Add(time.Second)
	p.Finish()
	check(t, r, "601 "+ddring.Schema.Source()+" 0000000000000004")
	for _, b := range []*publisher.Buffer{{Schema: "nope", Addr: 0x1000, Capacity: 8}, {Schema: otep4947.Schema.Name(), Addr: 0x1000, Capacity: 8}} {
		if _, err := NewProcess(Config{ID: publisher.ProcessID{PID: 600}, Buffer: b, ProcRoot: root, Observe: r.observe}); err == nil {
			t.Errorf("buffer %+v judged", b)
		}
		if _, _, err := ddslots.NewProcessReader(root).Read(publisher.ProcessID{PID: 600}, *b); err == nil {
			t.Errorf("buffer %+v read as slots", b)
		}
	}
}

// testSchema is a schema whose records carry test-source.
type testSchema struct{}

func (testSchema) Name() string                    { return "test" }
func (testSchema) Source() string                  { return "test-source" }
func (testSchema) SamplerRead() schema.SamplerRead { return schema.ReadRecordPointer }

// TestIgnoredSamples: samples of another PID, and of a source the process
// is not read through, give no observation.
func TestIgnoredSamples(t *testing.T) {
	root := t.TempDir()
	fakeproc.Tasks(t, root, 400, 400)
	otepOnly, r1, _ := newTest(t, Config{ID: publisher.ProcessID{PID: 400}, Variable: &otep4947.Schema})
	ddOnly, r2, _ := newTest(t, Config{ID: publisher.ProcessID{PID: 400}, Buffer: ddBuffer(0, 8), ProcRoot: root})
	s := &samples{pid: 400}
	other := &samples{pid: 401}
	for _, p := range []*Process{otepOnly, ddOnly} {
		p.Add(other.otep(401, otepRecord(1)))
		p.Add(other.dd(401, ddotel.Slot{SpanID: 1}))
	}
	otepOnly.Add(s.dd(400, ddotel.Slot{SpanID: 1}))
	ddOnly.Add(s.otep(400, otepRecord(1)))
	ddOnly.Finish()
	check(t, r1)
	check(t, r2)
}

// TestKeyMapRefresh: a record with a key index the map lacks makes the
// Process call the refresh once; a newer key map (a context update) gives
// one more chance.
func TestKeyMapRefresh(t *testing.T) {
	calls := 0
	refresh := func() ([]string, error) { calls++; return []string{"a", "b"}, nil }
	p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: 500}, Variable: &otep4947.Schema, KeyMap: []string{"a"}, RefreshKeyMap: refresh})
	s := &samples{pid: 500}
	p.Add(s.otep(501, otepRecord(1, 0, "x", 1, "y")))
	p.Add(s.otep(501, otepRecord(1, 2, "z"))) // index 2 unknown even after the refresh: no second call
	if calls != 1 || len(r.obs) != 2 || r.obs[0].Record.Attributes["b"] != "y" || len(r.obs[1].Record.Attributes) != 0 {
		t.Fatalf("%d refreshes; observations %+v", calls, r.obs)
	}
	p.SetKeyMap([]string{"a"}, func() ([]string, error) { calls++; return []string{"a", "b", "c"}, nil })
	r.obs = nil
	p.Add(s.otep(501, otepRecord(1, 2, "z")))
	if calls != 2 || r.obs[0].Record.Attributes["c"] != "z" {
		t.Fatalf("%d refreshes after a new key map; observation %+v", calls, r.obs[0].Record)
	}
}

// TestDDOwnership: how DD samples are judged against the thread listings
// before and after them (a fake procfs, so the threads are exactly these):
// a thread alone in its slot shows its slot; one sharing it with a thread
// of either listing is refused (collision); a new owner of a slot still
// holding its exited predecessor's value is refused (stale owner) until it
// writes; a thread in neither listing collides with a listed one of its
// slot and is trusted in a free slot; an empty slot is no context; a slot
// the kernel could not read says nothing; without a listing after the
// sample (the process is gone) nothing is trusted.
func TestDDOwnership(t *testing.T) {
	root := t.TempDir()
	const pid, capacity = 100, 16 // slots: 100 → 4, 101, 117, 133 → 5, 150 → 6
	fakeproc.Tasks(t, root, pid, 100, 101)
	p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: pid}, Buffer: ddBuffer(0x1000, capacity), ProcRoot: root})
	v, w := ddotel.Slot{TraceIDLow: 1, SpanID: 0xa}, ddotel.Slot{TraceIDLow: 3, SpanID: 0xb}
	s := &samples{pid: pid}
	batch := func(smps ...sampler.Sample) {
		n := len(r.obs)
		for _, smp := range smps {
			p.Add(smp)
		}
		if len(r.obs) != n {
			t.Fatalf("observed before a listing after the samples: %+v", r.obs[n:])
		}
		p.Flush()
	}
	batch(s.dd(101, v)) // alone in slot 5
	check(t, r, "101 dd_otel_ctx 000000000000000a")
	fakeproc.Tasks(t, root, pid, 100, 101, 117) // 117 starts in slot 5
	batch(s.dd(101, v), s.dd(117, v))
	check(t, r, "101 dd_otel_ctx refused:collision", "117 dd_otel_ctx refused:collision")
	fakeproc.Tasks(t, root, pid, 100, 117) // 101 exits
	batch(s.dd(117, v))                    // 101 was in the listing before
	batch(s.dd(117, v))                    // alone now, and the slot holds 101's value
	batch(s.dd(117, w))                    // it wrote
	check(t, r, "117 dd_otel_ctx refused:collision", "117 dd_otel_ctx refused:stale owner", "117 dd_otel_ctx 000000000000000b")
	batch(s.dd(133, w)) // in neither listing, slot 5 is 117's
	batch(s.dd(150, w)) // in neither listing, slot 6 is free
	batch(s.dd(100, ddotel.Slot{}))
	nr := s.dd(100, ddotel.Slot{})
	nr.SlotNotResident = true
	batch(nr)
	check(t, r, "133 dd_otel_ctx refused:collision", "150 dd_otel_ctx 000000000000000b",
		"100 dd_otel_ctx "+threadread.ReasonEmptySlot, "100 dd_otel_ctx refused:"+ReasonNotResident)
	if held, _ := p.Waiting(); held != 0 || p.SlotsKnown() == 0 {
		t.Errorf("held %d samples; %d slots remembered", held, p.SlotsKnown())
	}
	fakeproc.Tasks(t, root, pid) // gone
	batch(s.dd(117, w))
	check(t, r, "117 dd_otel_ctx refused:"+ReasonUnlisted)
}

// TestDDHeldUntilListing: a DD sample waits for a listing started after it
// was received, so that a thread started meanwhile in its slot is seen:
// Add lists when the last listing is ListEvery old; Tick delivers what
// waits without a further sample.
func TestDDHeldUntilListing(t *testing.T) {
	root := t.TempDir()
	const pid, capacity = 600, 8
	fakeproc.Tasks(t, root, pid, 600, 601)
	p, r, c := newTest(t, Config{ID: publisher.ProcessID{PID: pid}, Buffer: ddBuffer(0, capacity), ProcRoot: root, ListEvery: time.Second})
	s := &samples{pid: pid}
	v := ddotel.Slot{TraceIDLow: 1, SpanID: 0xc}
	p.Add(s.dd(601, v))
	fakeproc.Tasks(t, root, pid, 600, 601, 609) // 609 shares slot 1 with 601
	p.Tick()
	check(t, r) // not due yet
	c.advance(time.Second)
	p.Add(s.dd(601, v)) // due: lists, finds 609
	check(t, r, "601 dd_otel_ctx refused:collision", "601 dd_otel_ctx refused:collision")
	fakeproc.Tasks(t, root, pid, 600, 601) // 609 exits
	c.advance(time.Second)
	p.Add(s.dd(601, v)) // due: 609 was in the listing before
	check(t, r, "601 dd_otel_ctx refused:collision")
	// Alone again, it is refused until its value changes: it may read
	// what 609 wrote before exiting (ddotel.Owners.Contest).
	p.Add(s.dd(601, v))
	p.Add(s.dd(601, ddotel.Slot{TraceIDLow: 1, SpanID: 0xd}))
	c.advance(time.Second)
	p.Tick()
	check(t, r, "601 dd_otel_ctx refused:stale owner", "601 dd_otel_ctx 000000000000000d")
}

// TestBothSources: a process read through both sources gives an OTEP 4947
// sample, then a DD one, per capture; they make one observation, merged as
// in a snapshot (an OTEP 4947 record wins; a DD record beats no OTEP 4947
// record); a capture missing one source keeps what that source showed
// last, and is exact only if the source shown was read in it.
func TestBothSources(t *testing.T) {
	root := t.TempDir()
	const pid, tid = 200, 201
	fakeproc.Tasks(t, root, pid, pid, tid)
	p, r, c := newTest(t, Config{ID: publisher.ProcessID{PID: pid}, Variable: &otep4947.Schema, Buffer: ddBuffer(0, 64), ProcRoot: root})
	s := &samples{pid: pid}
	dd := func(span uint64) sampler.Sample { return s.dd(tid, ddotel.Slot{TraceIDLow: 7, SpanID: span}) }
	followed := func(smp sampler.Sample) sampler.Sample { smp.Followed = true; return smp }
	for _, smp := range []sampler.Sample{
		s.otep(tid, nil), dd(0xd1), // no OTEP 4947 record: the DD one
		s.otep(tid, otepRecord(0xe1)), dd(0xd1), // the OTEP 4947 record wins
		followed(s.otep(tid, otepRecord(0xe1))), // its DD sample not emitted (slot being written)
		followed(s.otep(tid, otepRecord(0xe1))), followed(dd(0xd1)),
		followed(dd(0xd2)),         // the OTEP 4947 read failed: it still has its record, not read now
		s.otep(tid, nil), dd(0xd2), // withdrawn: the DD record speaks
	} {
		p.Add(smp)
	}
	p.Flush()
	check(t, r,
		"201 dd_otel_ctx 00000000000000d1",
		"201 otep4947 00000000000000e1",
		"201 otep4947 00000000000000e1 exact",
		"201 otep4947 00000000000000e1 exact",
		"201 otep4947 00000000000000e1",
		"201 dd_otel_ctx 00000000000000d2")
	if t.Failed() {
		return
	}
	// A capture whose DD sample never comes is taken alone once it waited
	// ListEvery.
	p.Add(s.otep(tid, nil))
	p.Flush()
	if _, pending := p.Waiting(); pending != 1 || len(r.obs) != 0 {
		t.Fatalf("%d captures pending, %d observed", pending, len(r.obs))
	}
	c.advance(DefaultListEvery)
	p.Tick()
	check(t, r, "201 dd_otel_ctx 00000000000000d2")
}

// TestWithdrawnThenSlot: the OTEP 4947 record wins while the thread has
// one; once withdrawn, the DD slot speaks; a refused slot leaves the
// thread unobserved rather than with no context.
func TestWithdrawnThenSlot(t *testing.T) {
	root := t.TempDir()
	const pid, tid = 700, 701
	fakeproc.Tasks(t, root, pid, pid, tid)
	p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: pid}, Variable: &otep4947.Schema, Buffer: ddBuffer(0, 1024), ProcRoot: root})
	s := &samples{pid: pid}
	slot := ddotel.Slot{TraceIDLow: 0x77, SpanID: 0x88}
	capture := func(rec []byte, d ddotel.Slot) {
		p.Add(s.otep(tid, rec))
		p.Add(s.dd(tid, d))
		p.Flush()
	}
	capture(otepRecord(5), slot)
	capture(nil, slot)
	capture(nil, ddotel.Slot{})
	capture(nil, ddotel.Slot{TraceIDLow: 0x77, SpanID: 0x99})
	fakeproc.Tasks(t, root, pid, pid, tid, tid+1024) // a thread in tid's slot
	capture(nil, slot)
	capture(otepRecord(5)[:20], slot) // both refused: the OTEP 4947 reason
	check(t, r, "701 otep4947 0000000000000005", "701 dd_otel_ctx 0000000000000088",
		"701 otep4947 "+threadread.ReasonNullPointer, "701 dd_otel_ctx 0000000000000099",
		"701 dd_otel_ctx refused:collision", "701 otep4947 refused:"+ReasonParse)
}

// TestDDUnlistable: a process whose threads cannot be listed (here its
// task entry is not a directory; in life, over ptrace's thread cap) stays
// tracked: its DD samples count as unlisted, its OTEP samples are read.
func TestDDUnlistable(t *testing.T) {
	root := t.TempDir()
	const pid = 900
	fakeproc.Tasks(t, root, pid, pid)
	task := filepath.Join(root, strconv.Itoa(pid), "task")
	if err := os.RemoveAll(task); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(task, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p, r, _ := newTest(t, Config{ID: publisher.ProcessID{PID: pid}, Variable: &otep4947.Schema, Buffer: ddBuffer(0, 8), ProcRoot: root})
	s := &samples{pid: pid}
	capture := func(rec []byte) {
		p.Add(s.otep(pid, rec))
		p.Add(s.dd(pid, ddotel.Slot{TraceIDLow: 1, SpanID: 0xa}))
		p.Flush()
	}
	capture(otepRecord(5))
	capture(nil) // the record withdrawn: the slot would speak, but unlisted
	check(t, r, "900 otep4947 0000000000000005", "900 dd_otel_ctx refused:"+ReasonUnlisted)
}
