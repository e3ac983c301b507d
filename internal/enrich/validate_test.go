// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// validate checks that out, the processor's output for in, is a valid
// message: every index in range, index 0 of each table the empty element,
// the tables only appended to (so in's indices still mean what they
// meant), no duplicate entries added, no sample lost or given a key twice.
func validate(t testing.TB, in, out pprofile.Profiles) {
	t.Helper()
	for _, err := range validationErrors(in, out) {
		t.Error(err)
	}
}

func validationErrors(in, out pprofile.Profiles) []error {
	var errs []error
	fail := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	d, di := out.Dictionary(), in.Dictionary()
	strs, attrs, links, stacks := d.StringTable(), d.AttributeTable(), d.LinkTable(), d.StackTable()
	inRange := func(what string, i int32, n int) {
		if i < 0 || int(i) >= n {
			fail("%s index %d out of range [0, %d)", what, i, n)
		}
	}

	// Index 0 is the empty element.
	if strs.Len() > 0 && strs.At(0) != "" {
		fail("string 0 is %q, not empty", strs.At(0))
	}
	if attrs.Len() > 0 && !attrs.At(0).Equal(pprofile.NewKeyValueAndUnit()) {
		fail("attribute 0 is not empty")
	}
	if links.Len() > 0 && !links.At(0).Equal(pprofile.NewLink()) {
		fail("link 0 is not empty")
	}
	if stacks.Len() > 0 && stacks.At(0).LocationIndices().Len() != 0 {
		fail("stack 0 is not empty")
	}

	// Only appended to.
	if strs.Len() < di.StringTable().Len() || attrs.Len() < di.AttributeTable().Len() || links.Len() < di.LinkTable().Len() {
		fail("a table shrank")
	} else {
		for i, s := range di.StringTable().All() {
			if strs.At(i) != s {
				fail("string %d changed", i)
			}
		}
		for i, a := range di.AttributeTable().All() {
			if !attrs.At(i).Equal(a) {
				fail("attribute %d changed", i)
			}
		}
		for i, l := range di.LinkTable().All() {
			if !links.At(i).Equal(l) {
				fail("link %d changed", i)
			}
		}
	}
	if stacks.Len() != di.StackTable().Len() || d.LocationTable().Len() != di.LocationTable().Len() ||
		d.FunctionTable().Len() != di.FunctionTable().Len() || d.MappingTable().Len() != di.MappingTable().Len() {
		fail("stack, location, function or mapping table changed")
	}

	// No duplicates added: the added entries are unlike every other one.
	for i := di.StringTable().Len(); i < strs.Len(); i++ {
		for j := range strs.Len() {
			if j != i && strs.At(j) == strs.At(i) {
				fail("string %d (%q) duplicates %d", i, strs.At(i), j)
			}
		}
	}
	for i := di.AttributeTable().Len(); i < attrs.Len(); i++ {
		inRange("attribute key string", attrs.At(i).KeyStrindex(), strs.Len())
		for j := range attrs.Len() {
			if j != i && attrs.At(j).Equal(attrs.At(i)) {
				fail("attribute %d duplicates %d", i, j)
			}
		}
	}
	for i := max(1, di.LinkTable().Len()); i < links.Len(); i++ { // index 0 is checked above
		if links.At(i).TraceID().IsEmpty() || links.At(i).SpanID().IsEmpty() {
			fail("link %d added without ids", i)
		}
		for j := range links.Len() {
			if j != i && links.At(j).Equal(links.At(i)) {
				fail("link %d duplicates %d", i, j)
			}
		}
	}
	for i, a := range attrs.All() {
		inRange(fmt.Sprintf("attribute %d key string", i), a.KeyStrindex(), strs.Len())
		inRange(fmt.Sprintf("attribute %d unit string", i), a.UnitStrindex(), strs.Len())
	}

	// Every sample's indices in range, no key twice on a sample.
	for _, rp := range out.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				inRange("sample type string", p.SampleType().TypeStrindex(), strs.Len())
				for _, ai := range p.AttributeIndices().All() {
					inRange("profile attribute", ai, attrs.Len())
				}
				for _, s := range p.Samples().All() {
					inRange("stack", s.StackIndex(), stacks.Len())
					inRange("link", s.LinkIndex(), links.Len())
					keys := map[int32]bool{}
					for _, ai := range s.AttributeIndices().All() {
						inRange("sample attribute", ai, attrs.Len())
						if ai < 0 || int(ai) >= attrs.Len() {
							continue
						}
						k := attrs.At(int(ai)).KeyStrindex()
						if keys[k] {
							fail("sample has key %d twice", k) // the key index may be outside the string table
						}
						keys[k] = true
					}
				}
			}
		}
	}
	// Samples may be split by span, never lost: every timestamp and value
	// stays.
	if ti, to := totals(in), totals(out); ti != to || out.SampleCount() < in.SampleCount() {
		fail("in %d samples (timestamps, sum of values) %v, out %d %v", in.SampleCount(), ti, out.SampleCount(), to)
	}
	return errs
}

// totals counts the timestamps of a message and sums its sample values.
func totals(pd pprofile.Profiles) [2]int64 {
	var t [2]int64
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				for _, s := range p.Samples().All() {
					t[0] += int64(s.TimestampsUnixNano().Len())
					for _, v := range s.Values().All() {
						t[1] += v
					}
				}
			}
		}
	}
	return t
}

// TestValidatorCatchesBadOutput shows that the validator fails on the
// faults it is meant to catch, so that its silence in the other tests
// means something.
func TestValidatorCatchesBadOutput(t *testing.T) {
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(1)})
	b.Sample(p, t0, b.Thread(5)...)
	in := b.PD
	cases := map[string]func(pprofile.Profiles){
		"attribute index out of range": func(o pprofile.Profiles) {
			o.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).AttributeIndices().Append(99)
		},
		"link out of range": func(o pprofile.Profiles) {
			o.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).SetLinkIndex(7)
		},
		"duplicate attribute": func(o pprofile.Profiles) {
			o.Dictionary().AttributeTable().At(1).CopyTo(o.Dictionary().AttributeTable().AppendEmpty())
		},
		"duplicate link": func(o pprofile.Profiles) {
			l := o.Dictionary().LinkTable().AppendEmpty()
			l.SetTraceID([16]byte{1})
			l.SetSpanID([8]byte{1})
			l.CopyTo(o.Dictionary().LinkTable().AppendEmpty())
		},
		"non-empty link 0": func(o pprofile.Profiles) { o.Dictionary().LinkTable().At(0).SetSpanID([8]byte{1}) },
		"key twice": func(o pprofile.Profiles) {
			s := o.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
			kv := o.Dictionary().AttributeTable().AppendEmpty()
			kv.SetKeyStrindex(o.Dictionary().AttributeTable().At(int(s.AttributeIndices().At(0))).KeyStrindex())
			kv.Value().SetInt(77)
			s.AttributeIndices().Append(int32(o.Dictionary().AttributeTable().Len() - 1))
		},
		"sample lost": func(o pprofile.Profiles) {
			o.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().RemoveIf(func(pprofile.Sample) bool { return true })
		},
	}
	if errs := validationErrors(in, in); len(errs) > 0 {
		t.Fatalf("valid input rejected: %v", errs)
	}
	for name, spoil := range cases {
		out := pprofile.NewProfiles()
		in.CopyTo(out)
		spoil(out)
		if len(validationErrors(in, out)) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}
