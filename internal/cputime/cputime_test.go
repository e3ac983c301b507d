// SPDX-License-Identifier: Apache-2.0

package cputime

import (
	"math"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// keyedDict: attributes 1 a=x, 2 b=y, 3 a=z, 4 c=w.
func keyedDict() pprofile.ProfilesDictionary {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("", "a", "b", "c")
	d.AttributeTable().AppendEmpty()
	for _, kv := range []struct {
		k int32
		v string
	}{{1, "x"}, {2, "y"}, {1, "z"}, {3, "w"}} {
		a := d.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(kv.k)
		a.Value().SetStr(kv.v)
	}
	d.StackTable().AppendEmpty()
	return d
}

// TestKeys: per key, the sample's first attribute with it, -1 without;
// eager keys are filled by Read, others by PickKeys alone; a key past
// MaxKeys is ignored.
func TestKeys(t *testing.T) {
	s := pprofile.NewSample()
	s.AttributeIndices().Append(4, 3, 1, 2)
	s.TimestampsUnixNano().Append(1)
	for _, eager := range []bool{true, false} {
		r := &Reader{}
		r.SetKeys([]string{"a", "missing", "b"}, eager)
		r.Reset(keyedDict())
		var out Sample
		out.Keyed = [MaxKeys]int32{7, 7, 7}
		if why := r.Read(s, Nanoseconds, 10, &out); why != Valid {
			t.Fatalf("eager=%v: %v", eager, why)
		}
		want := [3]int32{3, -1, 2}
		if !eager {
			if got := [3]int32(out.Keyed[:3]); got != [3]int32{7, 7, 7} {
				t.Errorf("lazy keys: Read set Keyed %v", got)
			}
			r.PickKeys(&out)
		}
		if got := [3]int32(out.Keyed[:3]); got != want {
			t.Errorf("eager=%v: Keyed %v, want %v", eager, got, want)
		}
	}
	r := &Reader{}
	keys := make([]string, MaxKeys+1)
	keys[MaxKeys] = "a"
	r.SetKeys(keys, true)
	r.Reset(keyedDict())
	var out Sample
	if r.Read(s, Nanoseconds, 10, &out); out.Keyed != [MaxKeys]int32{-1, -1, -1, -1, -1, -1, -1, -1} {
		t.Errorf("a key past MaxKeys was picked: %v", out.Keyed)
	}
}

// TestCountTimesPeriodBound: count × period up to MaxInt64 is CPU time,
// one more count is an invalid value.
func TestCountTimesPeriodBound(t *testing.T) {
	r := NewReader(keyedDict())
	const period = 1000
	for _, c := range []struct {
		count int64
		want  Invalid
	}{{math.MaxInt64 / period, Valid}, {math.MaxInt64/period + 1, InvalidValue}} {
		s := pprofile.NewSample()
		s.Values().Append(c.count)
		var out Sample
		if got := r.Read(s, CountTimesPeriod, period, &out); got != c.want {
			t.Errorf("count %d: %v, want %v", c.count, got, c.want)
		} else if got == Valid && out.CPUNanos != c.count*period {
			t.Errorf("count %d: %d ns", c.count, out.CPUNanos)
		}
	}
}

// TestFrames: the empty frame is 0 without being added, others numbered
// from 1 once each, and afresh after Reset.
func TestFrames(t *testing.T) {
	var fs Frames
	if id, ok := fs.ID(Frame{}); !ok || id != 0 || fs.Len() != 1 {
		t.Fatalf("empty frame: %d %v, len %d", id, ok, fs.Len())
	}
	f, g := Frame{Function: "f"}, Frame{Mapping: "/lib/x.so", Address: 0x10}
	if _, ok := fs.ID(f); ok {
		t.Error("f has an id before Add")
	}
	if fs.Add(f) != 1 || fs.Add(g) != 2 || fs.Add(f) != 1 || fs.Add(Frame{}) != 0 || fs.Len() != 3 {
		t.Errorf("ids: f %d g %d len %d", fs.Add(f), fs.Add(g), fs.Len())
	}
	if fs.Frame(2) != g || fs.Frame(0) != (Frame{}) {
		t.Errorf("Frame(2) %v", fs.Frame(2))
	}
	fs.Reset()
	if _, ok := fs.ID(f); ok || fs.Add(g) != 1 {
		t.Error("Reset kept the frames")
	}
}
