// SPDX-License-Identifier: Apache-2.0

package profiledict

import (
	"slices"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// buildColumns finds which attribute entries are thread.id and process.pid
// and the key of each, once per message: samples then find theirs by
// index.
func (d *Dict) buildColumns() {
	tidKey, pidKey := int32(-1), int32(-1)
	for i, s := range d.Strings.All() {
		switch s {
		case KeyThreadID:
			tidKey = int32(i)
		case KeyPID:
			pidKey = int32(i)
		}
	}
	n := d.nAttrs
	d.tidOf = slices.Grow(d.tidOf[:0], n)[:n]
	d.pidOf = slices.Grow(d.pidOf[:0], n)[:n]
	d.keyOf = slices.Grow(d.keyOf[:0], n)[:n]
	for i := range n {
		d.tidOf[i], d.pidOf[i] = -1, -1
		kv := d.Attributes.At(i)
		d.keyOf[i] = kv.KeyStrindex()
		switch d.keyOf[i] {
		case tidKey:
			if v, ok := IntValue(kv.Value()); ok && v >= 0 {
				d.tidOf[i] = v
			}
		case pidKey:
			if v, ok := IntValue(kv.Value()); ok && v > 0 {
				d.pidOf[i] = v
				d.nPIDs++
			}
		}
	}
}

// KeyOf is, per attribute entry as received, its key's string index
// (Entries; the caller must not change it).
func (d *Dict) KeyOf() []int32 { return d.keyOf }

// PIDCount is the number of attribute entries holding a process.pid.
func (d *Dict) PIDCount() int { return d.nPIDs }

// PID returns the process.pid of the first of a sample's attributes (ai,
// checked) that holds one, and the attribute's index; -1, 0 when none
// does.
func (d *Dict) PID(ai pcommon.Int32Slice) (int64, int32) { return lookup(ai, d.pidOf) }

// TID is PID for thread.id.
func (d *Dict) TID(ai pcommon.Int32Slice) (int64, int32) { return lookup(ai, d.tidOf) }

// PIDAt returns the process.pid of attribute entry a, or -1 (also for an
// entry out of range, or in Indices mode, where the columns are not built).
func (d *Dict) PIDAt(a int32) int64 {
	if a < 0 || int(a) >= len(d.pidOf) {
		return -1
	}
	return d.pidOf[a]
}

func lookup(ai pcommon.Int32Slice, of []int64) (int64, int32) {
	for i := range ai.Len() {
		if idx := ai.At(i); idx > 0 && int(idx) < len(of) && of[idx] >= 0 {
			return of[idx], idx
		}
	}
	return -1, 0
}

// IntValue reads an int attribute the way detectors write it: an int, or
// its decimal string, or a double holding an integer.
func IntValue(v pcommon.Value) (int64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), true
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		return n, err == nil
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if d == float64(int64(d)) {
			return int64(d), true
		}
	}
	return 0, false
}
