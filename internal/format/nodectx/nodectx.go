// SPDX-License-Identifier: Apache-2.0

// Package nodectx follows the nodejs_v1_dev thread context of a Node.js
// process (@datadog/pprof's writer, docs/thread-context.md) from its TLS
// variable otel_thread_ctx_nodejs_v1 to the OTEP 4947 record: a thread runs
// many requests through async continuations, so the active record hangs off
// the isolate's current AsyncContextFrame (a JS Map keyed by an
// AsyncLocalStorage instance), not off the TLS variable itself.
//
// Every pointer is the process's choice: each one is checked (V8 tags,
// alignment, counts within the table) before it is followed, the hash chain
// walk is bounded, and a walk that does not check out ends with a reason.
package nodectx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Schema is the threadlocal.schema_version of this writer.
const Schema = "nodejs_v1_dev"

// VarSize is the TLS variable: cped_slot, als_handle, als_identity_hash
// (int32 + padding), undefined_addr.
const VarSize = 32

// MaxChain bounds the hash chain walk: a frame holds one entry per
// AsyncLocalStorage instance with a value, and a bucket averages two.
const MaxChain = 16

// maxBuckets bounds an OrderedHashMap's bucket count (V8 caps the table's
// capacity far below this; more is garbage).
const maxBuckets = 1 << 16

// Reasons a walk ends without a record: fixed strings, counted by them.
const (
	// ReasonNotRegistered: the thread's variable is unset (no isolate on it
	// ran the writer, or its isolate was torn down).
	ReasonNotRegistered = "node: not registered"
	// ReasonNoFrame: the isolate's current frame is undefined: no
	// AsyncLocalStorage holds a value.
	ReasonNoFrame = "node: no frame"
	// ReasonNoStore: the frame has no value for the writer's storage, or it
	// is undefined (no span active).
	ReasonNoStore = "node: no store"
	// ReasonBadPointer: a pointer failed its tag or alignment check.
	ReasonBadPointer = "node: bad pointer"
	// ReasonBadTable: the frame's hash table has impossible counts.
	ReasonBadTable = "node: bad table"
	// ReasonLongChain: the bucket's chain is longer than MaxChain.
	ReasonLongChain = "node: chain too long"
	// ReasonRead: a read of the walk failed.
	ReasonRead = "node: read error"
)

// NoContext: the reason says the thread has no context now.
func NoContext(reason string) bool {
	switch reason {
	case ReasonNotRegistered, ReasonNoFrame, ReasonNoStore:
		return true
	}
	return false
}

type Memory interface {
	ReadAt(p []byte, addr uint64) error
}

// Error is a walk that ended without a record; Reason is one of the above.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return e.Reason + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func fail(reason string, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf is err's reason ("" if err is not a walk's).
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// V8 tagging on 64-bit builds without pointer compression.
const (
	heapObjectTag  = 1
	heapObjectMask = 3
	smiShift       = 32
	notFound       = -1 // OrderedHashTable's empty bucket / end of chain
)

func heapObject(p uint64) bool { return p > 0xffff && p&heapObjectMask == heapObjectTag }

// smi decodes a Smi (value in the upper 32 bits, low 32 bits zero).
func smi(v uint64) (int64, bool) {
	if uint32(v) != 0 {
		return 0, false
	}
	return int64(int32(v >> smiShift)), true
}

// Var is the decoded TLS variable.
type Var struct {
	CPEDSlot, ALSHandle, UndefinedAddr uint64
	ALSHash                            int32
}

func DecodeVar(b []byte) Var {
	le := binary.LittleEndian
	return Var{CPEDSlot: le.Uint64(b[0:]), ALSHandle: le.Uint64(b[8:]),
		ALSHash: int32(le.Uint32(b[16:])), UndefinedAddr: le.Uint64(b[24:])}
}

type walker struct {
	mem Memory
	l   Layout
	buf [8]byte
}

func (w *walker) word(addr uint64, what string) (uint64, error) {
	if err := w.mem.ReadAt(w.buf[:], addr); err != nil {
		return 0, &Error{Reason: ReasonRead, Err: fmt.Errorf("%s at %#x: %w", what, addr, err)}
	}
	return binary.LittleEndian.Uint64(w.buf[:]), nil
}

// field reads the tagged word at offset off of heap object obj.
func (w *walker) field(obj, off uint64, what string) (uint64, error) {
	return w.word(obj-heapObjectTag+off, what)
}

// RecordAddr walks from the TLS variable at slot to the address of the
// thread's OTEP 4947 record. The thread must be stopped.
func RecordAddr(mem Memory, l Layout, slot uint64) (uint64, error) {
	w := &walker{mem: mem, l: l}
	var b [VarSize]byte
	if err := mem.ReadAt(b[:], slot); err != nil {
		return 0, &Error{Reason: ReasonRead, Err: fmt.Errorf("variable at %#x: %w", slot, err)}
	}
	return w.fromVar(DecodeVar(b[:]))
}

func (w *walker) fromVar(v Var) (uint64, error) {
	if v.CPEDSlot == 0 || v.ALSHandle == 0 || v.UndefinedAddr == 0 {
		return 0, &Error{Reason: ReasonNotRegistered}
	}
	if v.CPEDSlot%8 != 0 || v.ALSHandle%8 != 0 || !heapObject(v.UndefinedAddr) {
		return 0, fail(ReasonBadPointer, "variable: cped_slot %#x, als_handle %#x, undefined %#x", v.CPEDSlot, v.ALSHandle, v.UndefinedAddr)
	}
	frame, err := w.word(v.CPEDSlot, "continuation data")
	if err != nil {
		return 0, err
	}
	if frame == v.UndefinedAddr {
		return 0, &Error{Reason: ReasonNoFrame}
	}
	if !heapObject(frame) {
		return 0, fail(ReasonBadPointer, "frame %#x is not a heap object", frame)
	}
	key, err := w.word(v.ALSHandle, "storage handle")
	if err != nil {
		return 0, err
	}
	if !heapObject(key) {
		return 0, fail(ReasonBadPointer, "storage key %#x is not a heap object", key)
	}
	value, err := w.lookup(frame, key, v.ALSHash)
	if err != nil {
		return 0, err
	}
	if value == v.UndefinedAddr {
		return 0, &Error{Reason: ReasonNoStore}
	}
	if !heapObject(value) {
		return 0, fail(ReasonBadPointer, "store %#x is not a heap object", value)
	}
	return w.record(value)
}

// lookup finds key's value in the frame's OrderedHashMap: header, then the
// element, deleted and bucket counts, the buckets, then (key, value, chain)
// entries.
func (w *walker) lookup(frame, key uint64, hash int32) (uint64, error) {
	table, err := w.field(frame, w.l.JSMapTableOffset, "frame table")
	if err != nil {
		return 0, err
	}
	if !heapObject(table) {
		return 0, fail(ReasonBadPointer, "frame table %#x is not a heap object", table)
	}
	base := table - heapObjectTag + w.l.OrderedHashMapHeaderSize
	var counts [3]int64
	for i := range counts {
		v, err := w.word(base+uint64(i)*8, "table counts")
		if err != nil {
			return 0, err
		}
		n, ok := smi(v)
		if !ok || n < 0 {
			return 0, fail(ReasonBadTable, "table count %d is %#x", i, v)
		}
		counts[i] = n
	}
	used, buckets := counts[0]+counts[1], counts[2]
	if buckets == 0 || buckets > maxBuckets || buckets&(buckets-1) != 0 || used > 2*buckets {
		return 0, fail(ReasonBadTable, "table: %d elements, %d deleted, %d buckets", counts[0], counts[1], buckets)
	}
	entries := base + 24 + uint64(buckets)*8
	head, err := w.word(base+24+uint64(int64(hash)&(buckets-1))*8, "bucket")
	if err != nil {
		return 0, err
	}
	entry, ok := smi(head)
	for range MaxChain {
		if !ok || entry < notFound || entry >= used {
			return 0, fail(ReasonBadTable, "entry index %#x of %d", head, used)
		}
		if entry == notFound {
			return 0, &Error{Reason: ReasonNoStore}
		}
		at := entries + uint64(entry)*24
		k, err := w.word(at, "entry key")
		if err != nil {
			return 0, err
		}
		if k == key {
			return w.word(at+8, "entry value")
		}
		if head, err = w.word(at+16, "entry chain"); err != nil {
			return 0, err
		}
		entry, ok = smi(head)
	}
	return 0, fail(ReasonLongChain, "more than %d entries in bucket", MaxChain)
}

// record follows the store (the writer's JS object) to its record: its
// first internal field, then the native wrapper's field unless Direct.
func (w *walker) record(store uint64) (uint64, error) {
	wrap, err := w.field(store, w.l.WrappedObjectOffset, "wrapped object")
	if err != nil {
		return 0, err
	}
	if w.l.Direct {
		if wrap == 0 || wrap%2 != 0 {
			return 0, fail(ReasonBadPointer, "record pointer %#x", wrap)
		}
		return wrap, nil
	}
	if wrap == 0 || wrap%8 != 0 {
		return 0, fail(ReasonBadPointer, "wrapped object %#x", wrap)
	}
	rec, err := w.word(wrap+w.l.NativeWrapFieldsOffset, "native wrapper")
	if err != nil {
		return 0, err
	}
	if rec == 0 || rec%2 != 0 {
		return 0, fail(ReasonBadPointer, "record pointer %#x", rec)
	}
	return rec, nil
}
