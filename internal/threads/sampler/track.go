// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Target: its thread variable, a buffer discovery found, or both.
type Target struct {
	PID int
	// StartTicks: threads of a process that reused the PID are not read.
	StartTicks uint64
	// Thread is the variable found for the process's schema
	// (registry.Locate; nil: none is read); its schema's ThreadRecipe
	// says what the kernel reads from it.
	Thread *schema.Variable
	// Buffer is a buffer discovery found (nil: none is read); its schema
	// (registry.ForBuffer) gives what the kernel reads in it
	// (BufferRecipe).
	Buffer *publisher.Buffer
}

// Check makes TrackTarget's checks of t's recipe without a sampler: a
// schema's recipe can be tried where the program cannot be loaded.
func (t Target) Check() error {
	_, err := recipeFor(t)
	return err
}

// recipeFor makes the checks (tlsvar's, the schemas' recipes) before the
// kernel reads.
func recipeFor(t Target) (samplerRecipe, error) {
	var r samplerRecipe
	if t.Thread == nil && t.Buffer == nil {
		return r, errors.New("sampler: nothing to read (no thread variable, no buffer)")
	}
	r.StartTicks = t.StartTicks
	if t.Buffer != nil {
		if err := encodeBuffer(&r, *t.Buffer); err != nil {
			return samplerRecipe{}, err
		}
	}
	if t.Thread == nil {
		return r, nil
	}
	if err := encodeThread(&r, t.Thread); err != nil {
		return samplerRecipe{}, err
	}
	return r, nil
}

// encodeThread fills the recipe's part that reads v: where the variable is,
// then what the program does from it (its schema's ThreadRecipe).
func encodeThread(r *samplerRecipe, v *schema.Variable) error {
	if v.Location == nil || v.Schema == nil {
		return errors.New("sampler: thread variable without a location or a schema")
	}
	if err := encodeTLS(r, v.Location); err != nil {
		return err
	}
	vs, ok := v.Schema.(schema.VariableSchema)
	if !ok {
		return fmt.Errorf("sampler: schema %s is not read from a thread variable", v.Schema.Name())
	}
	rec, err := vs.ThreadRecipe(*v)
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if rec.BufferAddr != 0 {
		return fmt.Errorf("sampler: schema %s reads a buffer from its variable", v.Schema.Name())
	}
	// The kernel program reads a record pointer unless given a walk: a
	// recipe whose read and walk disagree would parse one layout as another.
	switch {
	case rec.Read == schema.ReadRecordPointer && rec.Walk == nil:
		return nil
	case rec.Read == schema.ReadNodeWalk && rec.Walk != nil:
		return encodeNode(r, rec.Walk)
	}
	return fmt.Errorf("sampler: schema %s: read %d with walk %t is not a thread read", v.Schema.Name(), rec.Read, rec.Walk != nil)
}

// ReadsBuffer reports whether the kernel program reads the buffers of
// schema s (TrackTarget refuses the others): its one buffer read is a
// thread's slot.
func ReadsBuffer(s schema.BufferSchema) bool {
	return s.SamplerRead() == schema.ReadDDSlot
}

// encodeBuffer fills the recipe's part that reads b, as its schema's
// BufferRecipe says.
func encodeBuffer(r *samplerRecipe, b publisher.Buffer) error {
	s, err := registry.ForBuffer(b)
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if !ReadsBuffer(s) {
		return fmt.Errorf("sampler: schema %s is not read from a buffer", s.Name())
	}
	rec, err := s.BufferRecipe(b)
	if err != nil {
		return fmt.Errorf("sampler: %w", err)
	}
	if rec.BufferAddr == 0 || rec.BufferCapacity == 0 || rec.Walk != nil {
		return fmt.Errorf("sampler: schema %s gave no buffer to read", s.Name())
	}
	r.DdAddr = rec.BufferAddr
	r.DdCapacity = rec.BufferCapacity
	return nil
}

// maxNodeOffset: the kernel adds these to user addresses; a layout's are
// a few words (nodectx bounds published ones too).
const maxNodeOffset = 4096

func encodeNode(r *samplerRecipe, l *nodectx.Layout) error {
	for _, off := range []uint64{l.JSMapTableOffset, l.OrderedHashMapHeaderSize, l.WrappedObjectOffset, l.NativeWrapFieldsOffset} {
		if off >= maxNodeOffset {
			return fmt.Errorf("sampler: node layout offset %d out of range", off)
		}
	}
	if l.TaggedSize != 8 {
		return fmt.Errorf("sampler: node layout with tagged size %d", l.TaggedSize)
	}
	r.Walk = walkNode
	if l.Direct {
		r.NodeDirect = 1
	}
	r.NodeTableOff = uint32(l.JSMapTableOffset)
	r.NodeHdrSize = uint32(l.OrderedHashMapHeaderSize)
	r.NodeWrappedOff = uint32(l.WrappedObjectOffset)
	r.NodeNativeOff = uint32(l.NativeWrapFieldsOffset)
	return nil
}

func encodeTLS(r *samplerRecipe, loc *tlsvar.Location) error {
	var want tlsvar.Arch
	switch runtime.GOARCH {
	case "amd64":
		want = tlsvar.AMD64
	case "arm64":
		want = tlsvar.ARM64
	}
	if loc.Arch != want {
		return fmt.Errorf("sampler: location is for %s, the kernel program reads %s threads", loc.Arch, runtime.GOARCH)
	}
	switch loc.Placement {
	case tlsvar.StaticTLS:
		r.Placement = placementStatic
		r.TpOffset = loc.TPOffset
	case tlsvar.DynamicTLS:
		if loc.ModuleID == 0 || loc.ModuleID > 1<<16 || loc.DTVEntrySize == 0 {
			return fmt.Errorf("sampler: bad dynamic location (module %d, entry %d)", loc.ModuleID, loc.DTVEntrySize)
		}
		r.Placement = placementDynamic
		r.SymOffset = loc.SymOffset
		r.ModuleId = loc.ModuleID
		r.DtvPtrOffset = loc.DTVPointerOffset
		r.DtvEntrySize = loc.DTVEntrySize
		r.DtvCountOffset = loc.DTVCountOffset
		r.DtvUnallocated = loc.DTVUnallocated
	default:
		return fmt.Errorf("sampler: location has no placement")
	}
	return nil
}

var errClosed = errors.New("sampler: closed")

// TrackTarget replaces any recipe of t.PID; untracked processes cost one
// lookup per tick. The PID namespace is read now: the kernel indexes a
// buffer's slots with the sampled thread's TID in it.
func (s *Sampler) TrackTarget(t Target) error {
	r, err := recipeFor(t)
	if err != nil {
		return err
	}
	if t.PID <= 0 {
		return fmt.Errorf("sampler: bad pid %d", t.PID)
	}
	if t.Buffer != nil {
		ns, err := pidns.Of("/proc", t.PID)
		if err != nil {
			return fmt.Errorf("sampler: tracking %d: %w", t.PID, err)
		}
		r.PidnsDev, r.PidnsIno = kernelDev(ns.Dev), ns.Ino
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if err := s.recipes.Update(uint32(t.PID), &r, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("sampler: tracking %d: %w", t.PID, err)
	}
	return nil
}

// Track reads pid's start time now and reads its OTEP 4947 variable at
// loc; callers that located the variable earlier for a known identity
// should use TrackTarget.
func (s *Sampler) Track(pid int, loc *tlsvar.Location) error {
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		return fmt.Errorf("sampler: tracking %d: %w", pid, err)
	}
	return s.TrackTarget(Target{PID: pid, StartTicks: ticks, Thread: &schema.Variable{Schema: &otep4947.Schema, Location: loc}})
}

// kernelDev: bpf_get_ns_current_pid_tgid compares the kernel's dev_t
// (major << 20 | minor), not stat's encoding.
func kernelDev(dev uint64) uint64 {
	return uint64(unix.Major(dev))<<20 | uint64(unix.Minor(dev))
}

// Untrack of an untracked pid is not an error.
func (s *Sampler) Untrack(pid int) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if err := s.recipes.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("sampler: untracking %d: %w", pid, err)
	}
	return nil
}
