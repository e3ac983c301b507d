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

	"github.com/otelctx/otelctx/internal/testpub"
)

type Publisher struct {
	tb   testing.TB
	proc *testpub.Publisher
	Cell Cell
	PID  int
	// Exe is the executable and Lib the library defining the variable
	// ("" for Exe cells).
	Exe, Lib string
}

// ReplyTimeout bounds every wait for the publisher's answer (dlopen and
// thread start-up under -race take longer than a process-context command).
var ReplyTimeout = 20 * time.Second

// Start builds (once) and runs a publisher for the cell; it is killed when
// the test ends.
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

// Do sends one command and returns the fields after "ok"; "err" fails the test.
func (p *Publisher) Do(format string, args ...any) []string {
	p.tb.Helper()
	return p.proc.Do(format, args...)
}

// Load dlopens the fillers and the library of a LateLoad cell.
func (p *Publisher) Load() {
	p.tb.Helper()
	p.Do("load")
}

// Threads starts n more worker threads and returns the total.
func (p *Publisher) Threads(n int) int {
	p.tb.Helper()
	f := p.Do("threads %d", n)
	total, _ := strconv.Atoi(f[0])
	return total
}

// Record is what a worker publishes.
type Record struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   uint8
	// Attrs maps key indexes (into the key map) to values (no spaces).
	Attrs map[uint8]string
}

// Truth is what a thread reports about itself.
type Truth struct {
	TID           int
	ThreadPointer uint64 // fs_base / TPIDR_EL0
	Slot          uint64 // &otel_thread_ctx_v1 as seen by the thread
	Record        uint64 // what the slot points at (0 after Clear with the swap writer)
}

// Set makes worker k publish r and park; it returns the worker's truth.
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

// Clear makes worker k withdraw its record (NULL pointer with the swap
// writer, valid=0 with the flip writer) and park.
func (p *Publisher) Clear(k int) Truth {
	p.tb.Helper()
	return p.truth(p.Do("clear %d", k), 4)
}

// Info returns worker k's TID and thread pointer without it touching the
// variable (for a dynamic-TLS module: its block stays unallocated).
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

// Kill kills the publisher and waits for it.
func (p *Publisher) Kill() { p.proc.Kill() }

type Span struct {
	Index              int
	TraceID            string // 32 hex
	SpanID             string // 16 hex
	BootStart, BootEnd uint64 // CLOCK_BOOTTIME ns
	RealStart, RealEnd int64  // CLOCK_REALTIME ns
}

// SwitchTruth is the ground truth of one switch run.
type SwitchTruth struct {
	Spans []Span
	// DoneBoot / DoneReal: the record was withdrawn before this instant.
	DoneBoot uint64
	DoneReal int64
}

// Switch starts a switch run on worker k: n spans of ms milliseconds each,
// busy-looping, ground truth appended to path (see threadpub.c). It
// returns the worker's TID at once; Wait waits for the end.
func (p *Publisher) Switch(k, n, ms int, path string) int {
	p.tb.Helper()
	f := p.Do("switch %d %d %d %s", k, n, ms, path)
	tid, err := strconv.Atoi(f[0])
	if err != nil {
		p.tb.Fatalf("threadpub %d: switch reply %q", p.PID, f)
	}
	return tid
}

// Wait waits until worker k's switch run is over.
func (p *Publisher) Wait(k int) {
	p.tb.Helper()
	p.Do("wait %d", k)
}

// ReadSwitchTruth parses the ground truth a switch run wrote to path (after
// Wait).
func ReadSwitchTruth(path string) (SwitchTruth, error) {
	var t SwitchTruth
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 8 && f[0] == "span":
			var s Span
			var e [5]error
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

// Crowd runs n short-lived threads that each publish a record, do loops
// iterations of integer work (swapping records every `every` iterations)
// and exit; it returns the wall time of the whole run and the CPU time the
// process used meanwhile. Raise ReplyTimeout for long runs.
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
