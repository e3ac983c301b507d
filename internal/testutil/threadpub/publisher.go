// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadpub

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

type Publisher struct {
	tb   testing.TB
	proc *testpub.Publisher
	Cell Cell
	PID  int
	// Lib is "" for Exe cells.
	Exe, Lib string
}

// ReplyTimeout: dlopen and thread start-up under -race take a while.
var ReplyTimeout = 20 * time.Second

// Start builds (once) and runs a publisher, killed when the test ends.
func Start(tb testing.TB, c Cell) *Publisher {
	tb.Helper()
	exe, args := Build(tb, c)
	if c.Writer == ValidFlip {
		args = append(args, "--writer", "flip")
	}
	if c.NoContext {
		args = append(args, "--no-context")
	}
	if c.LateLoad {
		if c.Where != Dlopen && c.Where != DlopenAfterExhaustion {
			tb.Fatalf("threadpub: LateLoad needs a dlopen cell (%s)", c)
		}
		args = append(args, "--late")
	}
	proc := testpub.StartBinaryTimeout(tb, ReplyTimeout, exe, args...)
	p := &Publisher{tb: tb, proc: proc, Cell: c, PID: proc.PID, Exe: exe}
	if c.Where != Exe {
		p.Lib = filepath.Join(filepath.Dir(exe), "libotelctx_tls.so")
	}
	return p
}

func (p *Publisher) Do(format string, args ...any) []string {
	p.tb.Helper()
	return p.proc.Do(format, args...)
}

func (p *Publisher) Load() {
	p.tb.Helper()
	p.Do("load")
}

func (p *Publisher) Threads(n int) int {
	p.tb.Helper()
	f := p.Do("threads %d", n)
	total, _ := strconv.Atoi(f[0])
	return total
}

type Record struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   uint8
	// Attrs: key index to value (no spaces).
	Attrs map[uint8]string
}

type Truth struct {
	TID           int
	ThreadPointer uint64 // fs_base / TPIDR_EL0
	Slot          uint64 // &otel_thread_ctx_v1 as seen by the thread
	Record        uint64 // what the slot points at (0 after Clear with the swap writer)
}

func (p *Publisher) Set(k int, r Record) Truth {
	p.tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "set %d %s %s %d", k, hex.EncodeToString(r.TraceID[:]), hex.EncodeToString(r.SpanID[:]), r.Flags)
	keys := make([]int, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %d=%s", k, r.Attrs[uint8(k)])
	}
	return p.truth(p.Do("%s", b.String()), 4)
}

// Clear withdraws the record (NULL with the swap writer, valid=0 with flip).
func (p *Publisher) Clear(k int) Truth {
	p.tb.Helper()
	return p.truth(p.Do("clear %d", k), 4)
}

// Info does not touch the variable: a dynamic-TLS block stays unallocated.
func (p *Publisher) Info(k int) Truth {
	p.tb.Helper()
	return p.truth(p.Do("info %d", k), 2)
}

// Main returns the main thread's truth (it touches the variable).
func (p *Publisher) Main() Truth {
	p.tb.Helper()
	return p.truth(p.Do("main"), 3)
}

func (p *Publisher) truth(f []string, n int) Truth {
	p.tb.Helper()
	if len(f) < n {
		p.tb.Fatalf("threadpub %d: short reply %q", p.PID, f)
	}
	var t Truth
	var err error
	if t.TID, err = strconv.Atoi(f[0]); err != nil {
		p.tb.Fatalf("threadpub %d: reply %q: %v", p.PID, f, err)
	}
	vals := []*uint64{&t.ThreadPointer, &t.Slot, &t.Record}
	for i := 1; i < n; i++ {
		if *vals[i-1], err = strconv.ParseUint(f[i], 0, 64); err != nil {
			p.tb.Fatalf("threadpub %d: reply %q: %v", p.PID, f, err)
		}
	}
	return t
}

func (p *Publisher) Kill() { p.proc.Kill() }

// Span is one span of a switch run: its record was visible from Start to
// End, both read on the worker itself.
type Span struct {
	Index              int
	TraceID            string // 32 hex
	SpanID             string // 16 hex
	BootStart, BootEnd uint64 // CLOCK_BOOTTIME ns
	RealStart, RealEnd int64  // CLOCK_REALTIME ns
	// Route and CPUNs (runs with routes, SwitchRoutes): the span's route
	// and the thread's CPU time while its record was visible.
	Route string
	CPUNs int64
}

type SwitchTruth struct {
	Spans []Span
	// DoneBoot / DoneReal: the record was withdrawn before this instant.
	DoneBoot uint64
	DoneReal int64
}

// Switch runs n busy spans of ms each on worker k, truth appended to path
// (threadpub.c); it returns the TID at once.
func (p *Publisher) Switch(k, n, ms int, path string) int {
	p.tb.Helper()
	f := p.Do("switch %d %d %d %s", k, n, ms, path)
	tid, err := strconv.Atoi(f[0])
	if err != nil {
		p.tb.Fatalf("threadpub %d: switch reply %q", p.PID, f)
	}
	return tid
}

// SwitchRoutes runs n busy spans on worker k, span i with the route and
// CPU time of routes[i % len(routes)] (threadpub.c: a span lasts until the
// thread has run that long), truth appended to path; it returns the TID at
// once.
func (p *Publisher) SwitchRoutes(k, n int, routes []RouteBusy, path string) int {
	p.tb.Helper()
	f := p.Do("switch %d %d 1 %s %s", k, n, path, RouteSpec(routes))
	tid, err := strconv.Atoi(f[0])
	if err != nil {
		p.tb.Fatalf("threadpub %d: switch reply %q", p.PID, f)
	}
	return tid
}

// RouteBusy is a route and the CPU time each of its spans runs for.
type RouteBusy struct {
	Route string
	Busy  time.Duration
}

// RouteSpec is the ROUTES argument of threadpub.c's switch command.
func RouteSpec(routes []RouteBusy) string {
	spec := make([]string, len(routes))
	for i, r := range routes {
		spec[i] = fmt.Sprintf("%s:%d", r.Route, r.Busy.Milliseconds())
	}
	return strings.Join(spec, ",")
}

// RouteMix is the mix of routes the CPU-time measurements run on every
// worker (the same on each: a timer-driven profiler on a busy host samples
// a CPU-bound thread more or less than its CPU time by an amount that
// differs from thread to thread, and the same mix on each keeps that from
// moving one route's share against another's): 480 ms of CPU time a round.
var RouteMix = []RouteBusy{
	{Route: "/checkout", Busy: 150 * time.Millisecond}, {Route: "/cart", Busy: 60 * time.Millisecond},
	{Route: "/search", Busy: 100 * time.Millisecond}, {Route: "/login", Busy: 50 * time.Millisecond},
	{Route: "/checkout", Busy: 120 * time.Millisecond},
}

// Wait returns when worker k has run its spans: CPU time, which a busy
// host stretches in wall time (the wait lasts while the publisher runs).
func (p *Publisher) Wait(k int) {
	p.tb.Helper()
	p.proc.DoCPU("wait %d", k)
}

func ReadSwitchTruth(path string) (SwitchTruth, error) {
	var t SwitchTruth
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case (len(f) == 8 || len(f) == 10) && f[0] == "span":
			var s Span
			var e [6]error
			if len(f) == 10 {
				s.Route = f[8]
				s.CPUNs, e[5] = strconv.ParseInt(f[9], 10, 64)
			}
			s.Index, e[0] = strconv.Atoi(f[1])
			s.TraceID, s.SpanID = f[2], f[3]
			s.BootStart, e[1] = strconv.ParseUint(f[4], 10, 64)
			s.BootEnd, e[2] = strconv.ParseUint(f[5], 10, 64)
			s.RealStart, e[3] = strconv.ParseInt(f[6], 10, 64)
			s.RealEnd, e[4] = strconv.ParseInt(f[7], 10, 64)
			for _, err := range e {
				if err != nil {
					return t, fmt.Errorf("%s: %q: %w", path, line, err)
				}
			}
			t.Spans = append(t.Spans, s)
		case len(f) == 3 && f[0] == "done":
			var e1, e2 error
			t.DoneBoot, e1 = strconv.ParseUint(f[1], 10, 64)
			t.DoneReal, e2 = strconv.ParseInt(f[2], 10, 64)
			if e1 != nil || e2 != nil {
				return t, fmt.Errorf("%s: %q", path, line)
			}
		default:
			return t, fmt.Errorf("%s: unexpected line %q", path, line)
		}
	}
	if t.DoneBoot == 0 {
		return t, fmt.Errorf("%s: run not finished", path)
	}
	return t, nil
}

// Crowd runs n short-lived publishing threads (swapping records every
// `every` of loops iterations); it returns wall and process CPU time.
func (p *Publisher) Crowd(n, loops, every int) (wall, cpu time.Duration) {
	p.tb.Helper()
	f := p.Do("crowd %d %d %d", n, loops, every)
	if len(f) != 2 {
		p.tb.Fatalf("threadpub %d: crowd reply %q", p.PID, f)
	}
	w, err1 := strconv.ParseInt(f[0], 10, 64)
	c, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		p.tb.Fatalf("threadpub %d: crowd reply %q", p.PID, f)
	}
	return time.Duration(w), time.Duration(c)
}
