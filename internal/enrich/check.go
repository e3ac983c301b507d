// SPDX-License-Identifier: Apache-2.0

package enrich

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Invalid says why a sample's indices or times cannot be trusted: such a
// sample is passed on untouched (not moved, split or joined) and counted.
type Invalid uint8

const (
	validSample           Invalid = iota
	invalidAttributeIndex         // an attribute index outside the attribute table
	invalidStringIndex            // one of its attributes has a key outside the string table
	invalidLinkIndex              // its link index is outside the link table
	invalidStackIndex             // its stack index is outside the stack table
	invalidLocationIndex          // its stack names a location outside the location table
	invalidMappingIndex           // a location of its stack names a mapping outside the mapping table
	invalidFunctionIndex          // a line of its stack names a function outside the function table
	invalidTimestamp              // a timestamp past 2262 (not an int64 of Unix ns)
	// NumInvalid is the number of verdicts, validSample included.
	NumInvalid
)

var invalidNames = [NumInvalid]string{"", "attribute_index", "string_index", "link_index", "stack_index",
	"location_index", "mapping_index", "function_index", "timestamp"}

// String is the verdict as the processor's metrics label it ("" when valid).
func (r Invalid) String() string { return invalidNames[r] }

// sampleCheck holds what checking a message's samples needs: the sizes of
// its tables as received, and the verdict on each stack the samples use
// (a stack is checked once per message, whatever number of samples use it).
type sampleCheck struct {
	nAttrs, nStrs, nLinks, nMaps, nFuncs int
	stacks                               pprofile.StackSlice
	locs                                 pprofile.LocationSlice
	// stackWhy: per stack index, 0 not checked yet, else 1 + its verdict.
	stackWhy []Invalid
}

func (c *sampleCheck) init(d pprofile.ProfilesDictionary) {
	c.nAttrs, c.nStrs, c.nLinks = d.AttributeTable().Len(), d.StringTable().Len(), d.LinkTable().Len()
	c.nMaps, c.nFuncs = d.MappingTable().Len(), d.FunctionTable().Len()
	c.stacks, c.locs = d.StackTable(), d.LocationTable()
	n := c.stacks.Len()
	c.stackWhy = slices.Grow(c.stackWhy[:0], n)[:n]
	clear(c.stackWhy)
}

func (c *sampleCheck) reset() {
	c.stacks, c.locs = pprofile.StackSlice{}, pprofile.LocationSlice{}
	c.stackWhy = c.stackWhy[:0]
}

// inTable reports whether i indexes a table of n entries. Index 0 is the
// "none" of every table, valid even when the sender left the table empty.
func inTable(i int32, n int) bool { return i == 0 || (i > 0 && int(i) < n) }

// sampleWhy returns why s's indices cannot be trusted, or validSample. keyOf is the
// key string index of each attribute table entry.
func (c *sampleCheck) sampleWhy(s pprofile.Sample, keyOf []int32) Invalid {
	for _, a := range s.AttributeIndices().All() {
		if !inTable(a, c.nAttrs) {
			return invalidAttributeIndex
		}
		if int(a) < len(keyOf) && !inTable(keyOf[a], c.nStrs) {
			return invalidStringIndex
		}
	}
	if !inTable(s.LinkIndex(), c.nLinks) {
		return invalidLinkIndex
	}
	si := s.StackIndex()
	if !inTable(si, c.stacks.Len()) {
		return invalidStackIndex
	}
	if int(si) < len(c.stackWhy) {
		if c.stackWhy[si] == 0 {
			c.stackWhy[si] = 1 + c.stackCheck(c.stacks.At(int(si)))
		}
		if w := c.stackWhy[si] - 1; w != validSample {
			return w
		}
	}
	return validSample // its timestamps are checked by classify, on its way through them
}

// stackCheck checks a stack's locations, and their mappings and functions.
func (c *sampleCheck) stackCheck(st pprofile.Stack) Invalid {
	for _, li := range st.LocationIndices().All() {
		if !inTable(li, c.locs.Len()) {
			return invalidLocationIndex
		}
		if int(li) >= c.locs.Len() {
			continue // 0 of an empty table
		}
		loc := c.locs.At(int(li))
		if !inTable(loc.MappingIndex(), c.nMaps) {
			return invalidMappingIndex
		}
		for _, l := range loc.Lines().All() {
			if !inTable(l.FunctionIndex(), c.nFuncs) {
				return invalidFunctionIndex
			}
		}
	}
	return validSample
}
