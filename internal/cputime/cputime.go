// SPDX-License-Identifier: Apache-2.0

// Package cputime reads CPU time out of OTLP profiles, one sample at a
// time: how much CPU a sample stands for, how many samples it counts, its
// link (trace and span), its attributes and its leaf function, every index
// checked against the dictionary's tables. It aggregates nothing: the
// cputime connector does that, and the processor may share the reading.
package cputime

import (
	"math"
	"math/bits"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/profiledict"
)

// Unit says how a profile's samples turn into CPU time.
type Unit uint8

const (
	// NotCPU: the profile does not measure CPU time (off-CPU, allocations,
	// or a shape this package does not know).
	NotCPU Unit = iota
	// CountTimesPeriod: samples count events (sample type unit "count", as
	// the OTel eBPF profiler's samples/count) and the period type is
	// cpu/nanoseconds: a sample is its count × the period.
	CountTimesPeriod
	// Nanoseconds: the sample type is cpu/nanoseconds: a sample's values
	// are its CPU time.
	Nanoseconds
)

// maxPeriod bounds a profile's period (one hour): a larger one is foreign
// input, not a sampling frequency.
const maxPeriod = int64(3600e9)

// Classify returns how p's samples turn into CPU time and the period (ns)
// a count is multiplied by (0 for NotCPU, and for Nanoseconds without one).
func Classify(dict pprofile.ProfilesDictionary, p pprofile.Profile) (Unit, int64) {
	strs := dict.StringTable()
	str := func(i int32) string {
		if i < 0 || int(i) >= strs.Len() {
			return ""
		}
		return strs.At(int(i))
	}
	st, su := str(p.SampleType().TypeStrindex()), str(p.SampleType().UnitStrindex())
	pt, pu := str(p.PeriodType().TypeStrindex()), str(p.PeriodType().UnitStrindex())
	period := p.Period()
	cpuPeriod := pt == "cpu" && pu == "nanoseconds" && period > 0 && period <= maxPeriod
	switch {
	case st == "cpu" && su == "nanoseconds":
		if !cpuPeriod {
			period = 0
		}
		return Nanoseconds, period
	case su == "count" && cpuPeriod:
		return CountTimesPeriod, period
	}
	return NotCPU, 0
}

// Invalid says why a sample cannot be read (Valid: it can).
type Invalid uint8

const (
	Valid Invalid = iota
	InvalidAttribute
	InvalidLink
	InvalidStack
	InvalidValue // a negative value, or a sum past what int64 nanoseconds hold
	numInvalid
)

var invalidNames = [numInvalid]string{"", "attribute_index", "link_index", "stack_index", "value"}

func (i Invalid) String() string { return invalidNames[i] }

// InvalidNames are the reasons' names, Valid's excluded.
func InvalidNames() []string { return append([]string(nil), invalidNames[1:]...) }

// Sample is what one profile sample stands for.
type Sample struct {
	CPUNanos int64
	// Count is how many times the profiler sampled: the sum of the values
	// (CountTimesPeriod), else the number of timestamps, at least 1.
	Count int64
	// Link is the sample's index into the link table when it names a span
	// (non-zero trace and span ids), else -1.
	Link int32
	// Time is the sample's last timestamp, or 0.
	Time uint64
	// Attrs are the sample's attribute indices, each inside the table.
	Attrs pcommon.Int32Slice
	// Keyed: per key of the Reader (SetKeys), the index of the sample's
	// first attribute with that key, else -1: filled by Read when the keys
	// are eager, else by PickKeys.
	Keyed [MaxKeys]int32
	Stack int32
}

// MaxKeys bounds the keys a Reader picks out of samples' attributes.
const MaxKeys = 8

// Reader reads the samples of one message (one dictionary), each checked
// against the dictionary's tables (profiledict.Indices). Not safe for
// concurrent use.
type Reader struct {
	profiledict.Dict
	// linkOK caches, per link index, 1 when it names a span, 2 when not.
	linkOK []uint8
	// keys: SetKeys' keys, by position; keyOf caches per attribute index
	// 0 (not looked at), 1 (none of the keys) or 2 + the key's position.
	keys      map[string]int
	nKeys     int
	eagerKeys bool
	keyOf     []int8
}

// SetKeys sets the keys whose attributes Sample.Keyed names (at most
// MaxKeys; the rest are ignored): eager, Read picks them out of every
// sample, else PickKeys picks them out of the samples that need them.
// They stay through Reset.
func (r *Reader) SetKeys(keys []string, eager bool) {
	keys = keys[:min(len(keys), MaxKeys)]
	r.keys, r.nKeys, r.eagerKeys = make(map[string]int, len(keys)), len(keys), eager
	for i, k := range keys {
		if _, dup := r.keys[k]; !dup {
			r.keys[k] = i
		}
	}
	r.resetKeyOf()
}

// NewReader reads samples against dict.
func NewReader(dict pprofile.ProfilesDictionary) *Reader {
	r := &Reader{}
	r.Reset(dict)
	return r
}

// Reset makes r read samples against dict, keeping its buffers.
func (r *Reader) Reset(dict pprofile.ProfilesDictionary) {
	r.Dict.Reset(dict, profiledict.Indices)
	r.linkOK = r.linkOK[:0]
	r.resetKeyOf()
}

func (r *Reader) resetKeyOf() {
	n := 0
	if r.nKeys > 0 {
		n = r.AttributeCount()
	}
	r.keyOf = slices.Grow(r.keyOf[:0], n)[:n]
	clear(r.keyOf)
}

// PickKeys fills s.Keyed (s from Read).
func (r *Reader) PickKeys(s *Sample) {
	for i := range r.nKeys {
		s.Keyed[i] = -1
	}
	if r.nKeys == 0 {
		return
	}
	for _, a := range s.Attrs.All() {
		r.pick(a, s)
	}
}

// pick sets out.Keyed from attribute index a (inside the table) when a
// has one of the keys and out has none of it yet.
func (r *Reader) pick(a int32, out *Sample) {
	k := r.keyOf[a]
	if k == 0 {
		k = r.lookupKey(a)
	}
	if k -= 2; k >= 0 && out.Keyed[k] < 0 {
		out.Keyed[k] = a
	}
}

// lookupKey returns and caches attribute index a's keyOf value.
func (r *Reader) lookupKey(a int32) int8 {
	k := int8(1)
	if i, ok := r.keys[r.AttrKey(a)]; ok {
		k = int8(i + 2)
	}
	r.keyOf[a] = k
	return k
}

// Read fills out with what s stands for in a profile of unit and period.
func (r *Reader) Read(s pprofile.Sample, unit Unit, period int64, out *Sample) Invalid {
	// The attributes as profiledict.Dict.Check goes through them, in the
	// loop that picks the keys.
	ai := s.AttributeIndices()
	eager := r.eagerKeys && r.nKeys > 0
	if eager {
		for i := range r.nKeys {
			out.Keyed[i] = -1
		}
	}
	for i := range ai.Len() {
		a := ai.At(i)
		if !r.HasAttribute(a) {
			return InvalidAttribute
		}
		if eager { // pick, inlined
			k := r.keyOf[a]
			if k == 0 {
				k = r.lookupKey(a)
			}
			if k -= 2; k >= 0 && out.Keyed[k] < 0 {
				out.Keyed[k] = a
			}
		}
	}
	switch r.CheckLinkAndStack(s.LinkIndex(), s.StackIndex()) {
	case profiledict.Valid:
	case profiledict.LinkIndex:
		return InvalidLink
	default:
		return InvalidStack
	}
	out.Attrs = ai
	out.Link = -1
	if li := s.LinkIndex(); li != 0 && r.isSpan(li) {
		out.Link = li
	}
	out.Stack = s.StackIndex()
	ts := s.TimestampsUnixNano()
	out.Time = 0
	if n := ts.Len(); n > 0 {
		out.Time = ts.At(n - 1)
	}
	vals := s.Values()
	var sum int64
	for i := range vals.Len() {
		v := vals.At(i)
		if v < 0 || sum > math.MaxInt64-v {
			return InvalidValue
		}
		sum += v
	}
	timesOr1 := int64(max(ts.Len(), 1))
	switch unit {
	case CountTimesPeriod:
		out.Count = timesOr1
		if vals.Len() > 0 {
			out.Count = sum
		}
		hi, lo := bits.Mul64(uint64(out.Count), uint64(period)) // no division per sample
		if hi != 0 || lo > math.MaxInt64 {
			return InvalidValue
		}
		out.CPUNanos = int64(lo)
	case Nanoseconds:
		out.Count = timesOr1
		switch {
		case vals.Len() > 0:
			out.CPUNanos = sum
		case period > 0:
			out.CPUNanos = timesOr1 * period
		default:
			return InvalidValue
		}
	default:
		return InvalidValue
	}
	return Valid
}

func (r *Reader) isSpan(li int32) bool {
	if len(r.linkOK) == 0 {
		n := r.LinkCount()
		r.linkOK = slices.Grow(r.linkOK, n)[:n]
		clear(r.linkOK)
	}
	switch r.linkOK[li] {
	case 1:
		return true
	case 2:
		return false
	}
	tr, sp := r.Link(li)
	ok := !tr.IsEmpty() && !sp.IsEmpty()
	r.linkOK[li] = 2
	if ok {
		r.linkOK[li] = 1
	}
	return ok
}

// Frame names a location: its function, or, unsymbolized, its mapping's
// file and address. Comparable, so that it can key a count.
type Frame struct {
	Function string
	Mapping  string
	Address  uint64
}

// Leaf returns the innermost frame of the stack at index st (one Read
// accepted): the first location's first line (lines after it are the
// functions it was inlined into). ok is false for an empty stack or an
// index outside its table.
func (r *Reader) Leaf(st int32) (f Frame, ok bool) {
	if int(st) >= r.StackCount() {
		return f, false
	}
	li := r.Stacks.At(int(st)).LocationIndices()
	if li.Len() == 0 {
		return f, false
	}
	l := li.At(0)
	if l < 0 || int(l) >= r.Locations.Len() {
		return f, false
	}
	loc := r.Locations.At(int(l))
	if lines := loc.Lines(); lines.Len() > 0 {
		if fi := lines.At(0).FunctionIndex(); fi > 0 && int(fi) < r.Functions.Len() {
			if name := r.Str(r.Functions.At(int(fi)).NameStrindex()); name != "" {
				return Frame{Function: name}, true
			}
		}
	}
	f.Address = loc.Address()
	if mi := loc.MappingIndex(); mi > 0 && int(mi) < r.Mappings.Len() {
		f.Mapping = r.Str(r.Mappings.At(int(mi)).FilenameStrindex())
	}
	return f, true
}

// Frames numbers frames, so that counts per frame are kept by a small
// integer rather than compared by name: id 0 is the empty Frame, the
// others go from 1 in the order they were added. Not safe for concurrent
// use; the caller bounds how many it adds.
type Frames struct {
	ids  map[Frame]int32
	list []Frame
}

// ID returns the id of f, ok false when f was not added (the empty Frame
// always has one: 0).
func (fs *Frames) ID(f Frame) (id int32, ok bool) {
	if f == (Frame{}) {
		return 0, true
	}
	id, ok = fs.ids[f]
	return id, ok
}

// Add returns the id of f, adding it if it has none.
func (fs *Frames) Add(f Frame) int32 {
	if id, ok := fs.ID(f); ok {
		return id
	}
	if fs.ids == nil {
		fs.ids = map[Frame]int32{}
	}
	if len(fs.list) == 0 {
		fs.list = append(fs.list, Frame{})
	}
	fs.list = append(fs.list, f)
	fs.ids[f] = int32(len(fs.list) - 1)
	return int32(len(fs.list) - 1)
}

// Frame returns the frame of id (one ID or Add returned).
func (fs *Frames) Frame(id int32) Frame {
	if id == 0 {
		return Frame{}
	}
	return fs.list[id]
}

// Len is one more than the largest id given out.
func (fs *Frames) Len() int { return max(len(fs.list), 1) }

// Reset forgets every frame (ids start again from 1), keeping the list's
// buffer.
func (fs *Frames) Reset() {
	clear(fs.ids)
	clear(fs.list) // drop the names for the GC
	fs.list = fs.list[:0]
}
