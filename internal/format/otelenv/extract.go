// SPDX-License-Identifier: Apache-2.0

package otelenv

import "bytes"

// Extractor finds the two variables in an environ image written to it in
// pieces of any size, keeping only their values (each at most MaxValueLen
// bytes): an environment of any size costs a bounded allocation.
type Extractor struct {
	// name holds the start of the current entry while it may still be one
	// of the variables (at most len("OTEL_RESOURCE_ATTRIBUTES=") bytes).
	name []byte
	// cur: the value being collected (nil: the current entry is not
	// collected); curVar: which variable it is.
	cur    []byte
	curVar int
	// skip: the rest of the current entry is of no interest.
	skip bool
	vals [2][]byte
	seen [2]bool
	// oversized: per variable, its first entry was over MaxValueLen.
	oversized [2]bool
}

var prefixes = [2][]byte{[]byte(VarServiceName + "="), []byte(VarResourceAttributes + "=")}

const maxPrefix = len(VarResourceAttributes + "=")

// Write consumes the next piece of the image; it never fails.
func (x *Extractor) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		end := bytes.IndexByte(p, 0)
		chunk := p
		if end >= 0 {
			chunk = p[:end]
		}
		x.feed(chunk)
		if end < 0 {
			break
		}
		x.endEntry()
		p = p[end+1:]
	}
	return n, nil
}

// feed takes bytes of the current entry.
func (x *Extractor) feed(b []byte) {
	if x.skip {
		return
	}
	if x.cur != nil {
		x.collect(b)
		return
	}
	// Still reading the name.
	need := maxPrefix - len(x.name)
	take := min(need, len(b))
	x.name = append(x.name, b[:take]...)
	for v, pre := range prefixes {
		if len(x.name) >= len(pre) && bytes.Equal(x.name[:len(pre)], pre) {
			if x.seen[v] { // getenv's rule: the first one counts
				x.skip = true
				return
			}
			x.curVar = v
			x.cur = make([]byte, 0, 64)
			x.collect(x.name[len(pre):])
			x.collect(b[take:])
			return
		}
	}
	if !x.couldBe() {
		x.skip = true
	}
}

// couldBe reports whether the name read so far is a prefix of a variable's.
func (x *Extractor) couldBe() bool {
	for _, pre := range prefixes {
		if len(x.name) <= len(pre) && bytes.Equal(pre[:len(x.name)], x.name) {
			return true
		}
	}
	return false
}

func (x *Extractor) collect(b []byte) {
	if x.oversized[x.curVar] {
		return
	}
	if len(x.cur)+len(b) > MaxValueLen {
		x.oversized[x.curVar] = true
		x.cur = x.cur[:0]
		return
	}
	x.cur = append(x.cur, b...)
}

func (x *Extractor) endEntry() {
	if x.cur != nil {
		x.seen[x.curVar] = true
		if !x.oversized[x.curVar] {
			x.vals[x.curVar] = x.cur
		}
	} else if !x.skip {
		// An entry that ended inside a prefix: "OTEL_SERVICE_NAME=" itself
		// is set to the empty string.
		for v, pre := range prefixes {
			if bytes.Equal(x.name, pre) && !x.seen[v] {
				x.seen[v] = true
				x.vals[v] = []byte{}
			}
		}
	}
	x.name, x.cur, x.skip = x.name[:0], nil, false
}

// Resource is the resource of the image written so far (an entry not
// terminated by a NUL counts, as the last one of environ may not be).
func (x *Extractor) Resource() Resource {
	y := *x
	y.name = append([]byte(nil), x.name...)
	y.endEntry()
	var sn, ra []byte
	if y.seen[0] && !y.oversized[0] {
		sn = nonNil(y.vals[0])
	}
	if y.seen[1] && !y.oversized[1] {
		ra = nonNil(y.vals[1])
	}
	r := ParseValues(sn, ra)
	for v := range y.oversized {
		if y.oversized[v] {
			r.Stats.Oversized++
			if v == 0 {
				r.Stats.ServiceNameSet = true
			} else {
				r.Stats.AttributesSet = true
			}
		}
	}
	return r
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
