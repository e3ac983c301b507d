// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package threadread reads a process's OTEP 4947 thread contexts through
// ptrace: each thread is stopped in turn so its record cannot change while
// it is read. A buffer schema's slots are read without stopping threads, in
// that schema's package; Merge joins the two reads.
package threadread

import (
	"errors"
	"fmt"
	"time"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Schema errors: the registry's (internal/threads/schema), named here too
// for the readers that test for them.
var (
	ErrNoSchema         = schema.ErrNoSchema
	ErrSchemaNotHandled = schema.ErrSchemaNotHandled
)

// readable: v is a variable this snapshot reads (a schema found as a
// variable, whose check it passes: the schema's own, with its walk when
// the schema has one).
func readable(v schema.Variable) error {
	if v.Schema == nil || v.Location == nil {
		return errors.New("threadread: no variable to read (no schema or no location)")
	}
	_, err := v.Checked()
	return err
}

// Reasons a thread has no record: fixed strings, so telemetry can count by them.
const (
	ReasonNullPointer   = "null pointer"   // the slot holds NULL: no active context
	ReasonNotAllocated  = "not allocated"  // the thread never touched the module's dynamic TLS
	ReasonNotValid      = "not valid"      // valid != 1: being written, or cleared
	ReasonAlreadyTraced = "already traced" // another tracer owns the thread
	ReasonExited        = "exited"         // the thread exited during the snapshot
	ReasonTimeout       = "timeout"        // the thread did not stop in time
	ReasonSlot          = "slot error"     // the slot address could not be computed
	ReasonRead          = "read error"     // the slot or the record could not be read
	ReasonStop          = "stop error"     // another ptrace failure
	ReasonNotTried      = "not tried"      // the snapshot was canceled or gave up on the process first
	ReasonThreadCap     = "thread cap"     // past Options.MaxThreads: not stopped (counted, not listed)
)

// NoContext: the reason says the thread has no context now, not that reading
// failed (a flip-style writer clears a record with valid = 0).
func NoContext(reason string) bool {
	switch reason {
	case ReasonNullPointer, ReasonNotAllocated, ReasonNotValid, ReasonEmptySlot, ReasonStaleOwner:
		return true
	}
	return nodectx.NoContext(reason)
}

type Options struct {
	// ReadCap bounds a record's bytes, header included.
	ReadCap int
	KeyMap  []string
	// RefreshKeyMap is called at most once per snapshot for an index outside
	// KeyMap: the map is append-only, so a newer context may know it.
	RefreshKeyMap func() ([]string, error)
	// Done ends the snapshot before the next thread.
	Done <-chan struct{}

	ProcRoot    string
	StopTimeout time.Duration
	// MaxThreads bounds the threads stopped (0: ptrace.DefaultMaxThreads).
	MaxThreads int
}

type Thread struct {
	TID int
	// ThreadPointer is fs_base / TPIDR_EL0 (0 if not stopped).
	ThreadPointer uint64
	// Record is nil when the thread has no (valid) record; Reason says why.
	Record *threadctx.Record
	Reason string
	Err    error
	// Attributes leave out unknown key indexes.
	Attributes map[string]string
	Stopped    time.Duration
	Source     string
}

type Stats struct {
	Ptrace  ptrace.Stats
	Records int
	Reasons map[string]int
	// UnknownKeys: attributes dropped because their index stayed unknown.
	KeyMapRefreshed bool
	UnknownKeys     int
	KeyMap          []string
}

// Snapshot reads the records of pid's threads from v, the variable the
// registry's Locate found for the process's schema, read as its schema says
// (a pointer to the record, or its walk); the threads carry its source.
func Snapshot(pid int, v schema.Variable, opts Options) ([]Thread, Stats, error) {
	if err := readable(v); err != nil {
		return nil, Stats{}, err
	}
	loc := v.Location
	readCap := opts.ReadCap
	if readCap == 0 {
		readCap = threadctx.DefaultReadCap
	}
	readCap = max(readCap, threadctx.HeaderSize)
	// The pointers are the process's choice: read only where a read cannot
	// block on a file system, with mappings loaded before any thread stops.
	mem := safemem.New(opts.ProcRoot, pid)
	_ = mem.Load() // on failure, the first read tries again and says why
	buf := make([]byte, readCap)
	var threads []Thread
	st := Stats{Reasons: map[string]int{}, KeyMap: opts.KeyMap}

	// Runs while the thread is stopped: read and parse only; naming after.
	pst, err := ptrace.EachThreadOpts(pid, ptrace.Options{ProcRoot: opts.ProcRoot, StopTimeout: opts.StopTimeout, Done: opts.Done, MaxThreads: opts.MaxThreads},
		func(s ptrace.Stopped) error {
			th := Thread{TID: s.TID, ThreadPointer: s.ThreadPointer}
			th.Record, th.Reason, th.Err = readOne(mem, loc, v.Walk, s.ThreadPointer, buf)
			threads = append(threads, th)
			return nil
		})
	st.Ptrace = pst
	if err != nil {
		return nil, st, err
	}
	// Threads that could not be stopped have no entry yet.
	byTID := make(map[int]int, len(threads))
	for i, th := range threads {
		byTID[th.TID] = i
	}
	out := make([]Thread, 0, len(pst.Threads))
	for _, ts := range pst.Threads {
		th := Thread{TID: ts.TID, Stopped: ts.Stopped, Source: v.Schema.Source()}
		if i, ok := byTID[ts.TID]; ok {
			th.ThreadPointer = threads[i].ThreadPointer
			th.Record, th.Reason, th.Err = threads[i].Record, threads[i].Reason, threads[i].Err
		}
		if ts.Err != nil && th.Record == nil && th.Reason == "" {
			th.Reason, th.Err = stopReason(ts.Err), ts.Err
		}
		out = append(out, th)
	}
	name(out, opts, &st)
	if pst.LeftOut > 0 {
		st.Reasons[ReasonThreadCap] += pst.LeftOut
	}
	for _, th := range out {
		if th.Record != nil {
			st.Records++
		} else {
			st.Reasons[th.Reason]++
		}
	}
	return out, st, nil
}

func readOne(mem *safemem.Memory, loc *tlsvar.Location, node *nodectx.Layout, tp uint64, buf []byte) (*threadctx.Record, string, error) {
	slot, err := loc.SlotAddr(mem, tp)
	if errors.Is(err, tlsvar.ErrNotAllocated) {
		return nil, ReasonNotAllocated, nil
	}
	if err != nil {
		return nil, ReasonSlot, err
	}
	var ptr uint64
	if node != nil {
		if ptr, err = nodectx.RecordAddr(mem, *node, slot); err != nil {
			if r := nodectx.ReasonOf(err); nodectx.NoContext(r) {
				return nil, r, nil
			}
			return nil, nodectx.ReasonOf(err), err
		}
	} else if ptr, err = mem.ReadUint64(slot); err != nil {
		return nil, ReasonRead, fmt.Errorf("slot at %#x: %w", slot, err)
	}
	if ptr == 0 {
		return nil, ReasonNullPointer, nil
	}
	hdr := buf[:threadctx.HeaderSize]
	if err := mem.ReadAt(hdr, ptr); err != nil {
		return nil, ReasonRead, fmt.Errorf("record header at %#x: %w", ptr, err)
	}
	n := min(threadctx.AttrsDataSize(hdr), len(buf)-threadctx.HeaderSize)
	rec, err := threadctx.Parse(hdr)
	if err != nil {
		return nil, ReasonNotValid, err
	}
	if n > 0 {
		if err := mem.ReadAt(buf[threadctx.HeaderSize:threadctx.HeaderSize+n], ptr+threadctx.HeaderSize); err != nil {
			return nil, ReasonRead, fmt.Errorf("record attrs_data (%d bytes) at %#x: %w", n, ptr+threadctx.HeaderSize, err)
		}
		if rec, err = threadctx.Parse(buf[:threadctx.HeaderSize+n]); err != nil {
			return nil, ReasonNotValid, err
		}
	} else if threadctx.AttrsDataSize(hdr) > 0 {
		rec.Truncated = true
	}
	return &rec, "", nil
}

func stopReason(err error) string {
	switch {
	case errors.Is(err, ptrace.ErrAlreadyTraced):
		return ReasonAlreadyTraced
	case errors.Is(err, ptrace.ErrExited):
		return ReasonExited
	case errors.Is(err, ptrace.ErrTimeout):
		return ReasonTimeout
	case errors.Is(err, ptrace.ErrCanceled), errors.Is(err, ptrace.ErrGaveUp):
		return ReasonNotTried
	}
	return ReasonStop
}

// name refreshes the key map at most once for the whole snapshot.
func name(threads []Thread, opts Options, st *Stats) {
	keyMap := opts.KeyMap
	unknown := false
	for i := range threads {
		if threads[i].Record == nil {
			continue
		}
		var u []uint8
		threads[i].Attributes, u = threads[i].Record.Named(keyMap)
		unknown = unknown || len(u) > 0
	}
	if unknown && opts.RefreshKeyMap != nil {
		st.KeyMapRefreshed = true
		if km, err := opts.RefreshKeyMap(); err == nil && len(km) > len(keyMap) {
			keyMap = km
			st.KeyMap = km
		}
	}
	for i := range threads {
		if threads[i].Record == nil {
			continue
		}
		var u []uint8
		threads[i].Attributes, u = threads[i].Record.Named(keyMap)
		st.UnknownKeys += len(u)
	}
}
