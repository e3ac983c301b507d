// SPDX-License-Identifier: Apache-2.0

// Package profiledict reads an OTLP profiles message's dictionary for the
// samples that name its entries: whether a sample's indices can be
// trusted, what its attributes hold, and which attribute entries carry a
// process.pid or a thread.id. The join (internal/enrich) and the CPU time
// reader (internal/cputime) share it, so that a sample is judged one way.
package profiledict

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// The attribute keys of the columns Dict keeps.
const (
	KeyPID      = "process.pid"
	KeyThreadID = "thread.id"
)

// Checks say how far Check looks.
type Checks uint8

const (
	// Indices checks the sample's own indices: attributes, link and stack.
	// An attribute index must name an entry (its key is read), so index 0
	// of an empty attribute table is refused.
	Indices Checks = iota
	// Entries checks also what the entries name: each attribute's key in
	// the string table, the stack's locations, their mappings and lines'
	// functions. Index 0 is every table's "none", valid even when the
	// sender left the table empty. Reset then builds the columns.
	Entries
)

// Invalid says why a sample's indices cannot be trusted (Valid: they can).
type Invalid uint8

const (
	Valid          Invalid = iota
	AttributeIndex         // an attribute index outside the attribute table
	StringIndex            // one of its attributes has a key outside the string table
	LinkIndex              // its link index is outside the link table
	StackIndex             // its stack index is outside the stack table
	LocationIndex          // its stack names a location outside the location table
	MappingIndex           // a location of its stack names a mapping outside the mapping table
	FunctionIndex          // a line of its stack names a function outside the function table
	// NumInvalid is the number of verdicts, Valid included.
	NumInvalid
)

// Dict is one message's dictionary: its tables, their sizes as received,
// and what checking samples against them has learnt. Reset reuses its
// buffers; not safe for concurrent use.
type Dict struct {
	Strings    pcommon.StringSlice
	Attributes pprofile.KeyValueAndUnitSlice
	Links      pprofile.LinkSlice
	Stacks     pprofile.StackSlice
	Locations  pprofile.LocationSlice
	Functions  pprofile.FunctionSlice
	Mappings   pprofile.MappingSlice

	checks                                Checks
	nStrs, nAttrs, nLinks, nStacks, nLocs int
	nFuncs, nMaps                         int
	// stackWhy: per stack index, 0 not checked yet, else 1 + its verdict
	// (a stack is checked once per message, whatever number of samples
	// use it).
	stackWhy []Invalid

	// The columns (Entries): per attribute entry as received, its key's
	// string index, and the process.pid / thread.id it holds, or -1.
	keyOf        []int32
	pidOf, tidOf []int64
	nPIDs        int
}

// Reset makes d the dictionary of a message, checked as checks say,
// keeping its buffers.
func (d *Dict) Reset(dict pprofile.ProfilesDictionary, checks Checks) {
	*d = Dict{
		Strings: dict.StringTable(), Attributes: dict.AttributeTable(), Links: dict.LinkTable(),
		Stacks: dict.StackTable(), Locations: dict.LocationTable(), Functions: dict.FunctionTable(), Mappings: dict.MappingTable(),
		checks:   checks,
		stackWhy: d.stackWhy[:0], keyOf: d.keyOf[:0], pidOf: d.pidOf[:0], tidOf: d.tidOf[:0],
	}
	d.nStrs, d.nAttrs, d.nLinks, d.nStacks = d.Strings.Len(), d.Attributes.Len(), d.Links.Len(), d.Stacks.Len()
	d.nLocs, d.nFuncs, d.nMaps = d.Locations.Len(), d.Functions.Len(), d.Mappings.Len()
	if checks == Entries {
		d.stackWhy = slices.Grow(d.stackWhy, d.nStacks)[:d.nStacks]
		clear(d.stackWhy)
		d.buildColumns()
	}
}

// Forget drops the message's tables (its pdata), keeping the buffers.
func (d *Dict) Forget() {
	*d = Dict{stackWhy: d.stackWhy[:0], keyOf: d.keyOf[:0], pidOf: d.pidOf[:0], tidOf: d.tidOf[:0]}
}

// AttributeCount, LinkCount and StackCount are the tables' sizes as
// received.
func (d *Dict) AttributeCount() int { return d.nAttrs }
func (d *Dict) LinkCount() int      { return d.nLinks }
func (d *Dict) StackCount() int     { return d.nStacks }

// inTable reports whether i indexes a table of n entries, 0 included.
func inTable(i int32, n int) bool { return uint(i) < uint(max(n, 1)) }

// Check returns why s's indices cannot be trusted, or Valid: its
// attributes first, then its link and its stack.
func (d *Dict) Check(s pprofile.Sample) Invalid {
	ai := s.AttributeIndices()
	for i := range ai.Len() {
		a := ai.At(i)
		if d.checks == Indices {
			if !d.HasAttribute(a) {
				return AttributeIndex
			}
			continue
		}
		if !inTable(a, d.nAttrs) {
			return AttributeIndex
		}
		if int(a) < len(d.keyOf) && !inTable(d.keyOf[a], d.nStrs) {
			return StringIndex
		}
	}
	si := s.StackIndex()
	if why := d.CheckLinkAndStack(s.LinkIndex(), si); why != Valid || int(si) >= len(d.stackWhy) {
		return why
	}
	return d.stackVerdict(si)
}

// HasAttribute reports whether a names an entry of the attribute table:
// Check's rule for a sample's attribute index under Indices, for a reader
// that goes through them itself (before CheckLinkAndStack).
func (d *Dict) HasAttribute(a int32) bool { return a >= 0 && int(a) < d.nAttrs }

// CheckLinkAndStack checks a sample's link and stack indices (link and
// stack): Check past the sample's attributes, under Indices.
func (d *Dict) CheckLinkAndStack(link, stack int32) Invalid {
	switch {
	case !inTable(link, d.nLinks):
		return LinkIndex
	case !inTable(stack, d.nStacks):
		return StackIndex
	}
	return Valid
}

// stackVerdict returns the verdict on stack si (inside the table),
// checking it the first time.
func (d *Dict) stackVerdict(si int32) Invalid {
	if d.stackWhy[si] == 0 {
		d.stackWhy[si] = 1 + d.checkStack(d.Stacks.At(int(si)))
	}
	return d.stackWhy[si] - 1
}

// checkStack checks a stack's locations, and their mappings and functions.
func (d *Dict) checkStack(st pprofile.Stack) Invalid {
	for _, li := range st.LocationIndices().All() {
		if !inTable(li, d.nLocs) {
			return LocationIndex
		}
		if int(li) >= d.nLocs {
			continue // 0 of an empty table
		}
		loc := d.Locations.At(int(li))
		if !inTable(loc.MappingIndex(), d.nMaps) {
			return MappingIndex
		}
		for _, l := range loc.Lines().All() {
			if !inTable(l.FunctionIndex(), d.nFuncs) {
				return FunctionIndex
			}
		}
	}
	return Valid
}

// Str returns the string at index i, or "" outside the table.
func (d *Dict) Str(i int32) string {
	if i < 0 || int(i) >= d.nStrs {
		return ""
	}
	return d.Strings.At(int(i))
}

// AttrKey returns the key of attribute index a (one Check accepted).
func (d *Dict) AttrKey(a int32) string { return d.Str(d.Attributes.At(int(a)).KeyStrindex()) }

// AttrValue returns the value of attribute index a (one Check accepted).
func (d *Dict) AttrValue(a int32) pcommon.Value { return d.Attributes.At(int(a)).Value() }

// Link returns the trace and span ids of link index li (one Check
// accepted, inside the table).
func (d *Dict) Link(li int32) (pcommon.TraceID, pcommon.SpanID) {
	l := d.Links.At(int(li))
	return l.TraceID(), l.SpanID()
}
