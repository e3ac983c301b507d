// SPDX-License-Identifier: Apache-2.0

package profiledict

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// dictionary: strings "", "k", "process.pid", "thread.id"; attributes
// none, k=v (key 1), process.pid=42, thread.id="7", one with key 99
// (outside the string table); one link besides none; stacks none and one
// naming location 5 (outside its table).
func dictionary() pprofile.ProfilesDictionary {
	d := pprofile.NewProfilesDictionary()
	d.StringTable().Append("", "k", KeyPID, KeyThreadID)
	d.AttributeTable().AppendEmpty()
	kv := d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(1)
	kv.Value().SetStr("v")
	kv = d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(2)
	kv.Value().SetInt(42)
	kv = d.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(3)
	kv.Value().SetStr("7")
	d.AttributeTable().AppendEmpty().SetKeyStrindex(99)
	d.LinkTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.StackTable().AppendEmpty().LocationIndices().Append(5)
	return d
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name             string
		attrs            []int32
		link, stack      int32
		indices, entries Invalid
	}{
		{"valid", []int32{1, 2}, 1, 0, Valid, Valid},
		{"attribute past the table", []int32{1, 5}, 0, 0, AttributeIndex, AttributeIndex},
		{"negative attribute", []int32{-1}, 0, 0, AttributeIndex, AttributeIndex},
		{"key past the string table", []int32{4}, 0, 0, Valid, StringIndex},
		{"link past the table", nil, 2, 0, LinkIndex, LinkIndex},
		{"stack past the table", nil, 0, 2, StackIndex, StackIndex},
		{"location past the table", nil, 0, 1, Valid, LocationIndex},
		{"the first reason wins", []int32{4}, 2, 0, LinkIndex, StringIndex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pprofile.NewSample()
			s.AttributeIndices().FromRaw(tc.attrs)
			s.SetLinkIndex(tc.link)
			s.SetStackIndex(tc.stack)
			var d Dict
			for checks, want := range map[Checks]Invalid{Indices: tc.indices, Entries: tc.entries} {
				d.Reset(dictionary(), checks)
				if got := d.Check(s); got != want {
					t.Errorf("checks %d: %d, want %d", checks, got, want)
				}
			}
		})
	}
}

// TestEmptyTables: index 0 is every table's "none", but an attribute index
// must name an entry where the reader reads its key.
func TestEmptyTables(t *testing.T) {
	s := pprofile.NewSample()
	s.AttributeIndices().Append(0)
	var d Dict
	d.Reset(pprofile.NewProfilesDictionary(), Indices)
	if got := d.Check(s); got != AttributeIndex {
		t.Errorf("Indices: %d, want AttributeIndex", got)
	}
	d.Reset(pprofile.NewProfilesDictionary(), Entries)
	if got := d.Check(s); got != Valid {
		t.Errorf("Entries: %d, want Valid", got)
	}
}

func TestColumns(t *testing.T) {
	var d Dict
	d.Reset(dictionary(), Entries)
	ai := pprofile.NewSample().AttributeIndices()
	ai.FromRaw([]int32{1, 3, 2})
	if pid, a := d.PID(ai); pid != 42 || a != 2 {
		t.Errorf("PID: %d at %d, want 42 at 2", pid, a)
	}
	if tid, a := d.TID(ai); tid != 7 || a != 3 {
		t.Errorf("TID: %d at %d, want 7 at 3", tid, a)
	}
	if d.PIDCount() != 1 || d.PIDAt(1) != -1 {
		t.Errorf("PIDCount %d, PIDAt(1) %d: want 1, -1", d.PIDCount(), d.PIDAt(1))
	}
	if d.PIDAt(-1) != -1 || d.PIDAt(int32(d.AttributeCount())) != -1 {
		t.Error("PIDAt out of the table: want -1")
	}
	var idx Dict // Indices mode builds no columns
	idx.Reset(dictionary(), Indices)
	if idx.PIDAt(2) != -1 {
		t.Errorf("PIDAt(2) in Indices mode: %d, want -1", idx.PIDAt(2))
	}
	d.Forget()
	if d.AttributeCount() != 0 || len(d.KeyOf()) != 0 {
		t.Error("Forget kept the message's tables")
	}
}
