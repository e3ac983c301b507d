// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/otelctx/otelctx/internal/catalogview"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

// contextJSON is the object "dump --json" prints (and "list --json" prints
// an array of). The first five keys are the documented format, in this
// order; the others follow and are omitted when empty.
type contextJSON struct {
	PID           int             `json:"pid"`
	PublishedAtNs uint64          `json:"published_at_ns"`
	Resource      map[string]any  `json:"resource"`
	Attributes    map[string]any  `json:"attributes"`
	ThreadLocal   threadLocalJSON `json:"threadlocal"`

	Executable             string          `json:"executable,omitempty"`
	DroppedAttributesCount uint32          `json:"dropped_attributes_count,omitempty"`
	EntityRefs             []entityRefJSON `json:"entity_refs,omitempty"`
}

// threadLocalJSON is always an object with both fields, never null.
type threadLocalJSON struct {
	SchemaVersion   string   `json:"schema_version"`
	AttributeKeyMap []string `json:"attribute_key_map"`
}

type entityRefJSON struct {
	Type            string   `json:"type"`
	IDKeys          []string `json:"id_keys"`
	DescriptionKeys []string `json:"description_keys"`
}

func newContextJSON(p *publisher.Process) contextJSON {
	c := &p.Context
	out := contextJSON{
		PID:           p.ID.PID,
		PublishedAtNs: c.PublishedAtNs,
		Resource:      jsonAttributes(c.Resource.Attributes),
		Attributes:    jsonAttributes(c.Attributes),
		ThreadLocal: threadLocalJSON{
			SchemaVersion:   c.ThreadLocal.SchemaVersion,
			AttributeKeyMap: nonNil(c.ThreadLocal.AttributeKeyMap),
		},
		Executable:             p.ExecutablePath,
		DroppedAttributesCount: c.Resource.DroppedAttributesCount,
	}
	if out.Executable == "" {
		out.Executable = p.ExecutableName
	}
	for _, r := range c.Resource.EntityRefs {
		out.EntityRefs = append(out.EntityRefs, entityRefJSON{
			Type:            r.Type,
			IDKeys:          nonNil(r.IDKeys),
			DescriptionKeys: nonNil(r.DescriptionKeys),
		})
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// jsonAttributes and jsonValue are the conversion the collector's
// catalog view uses too.
func jsonAttributes(attrs []processctx.Attribute) map[string]any {
	return catalogview.Attributes(attrs)
}

func jsonValue(v processctx.Value) any { return catalogview.Value(v) }

// writeJSON prints v indented, without HTML escaping (this is a terminal).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeText prints a readable multi-line dump of one process context.
func writeText(w io.Writer, p *publisher.Process, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := &p.Context
	exe := p.ExecutablePath
	if exe == "" {
		exe = p.ExecutableName
	}
	fmt.Fprintf(tw, "pid\t%d\n", p.ID.PID)
	fmt.Fprintf(tw, "executable\t%s\n", cleanText(exe))
	if !p.CreationTime.IsZero() {
		fmt.Fprintf(tw, "created\t%s (%s ago)\n", p.CreationTime.Format(time.RFC3339),
			max(now.Sub(p.CreationTime), 0).Truncate(time.Second))
	}
	fmt.Fprintf(tw, "mapping\t%s at %#x\n", cleanText(p.MappingName), p.MappingAddr)
	fmt.Fprintf(tw, "published_at_ns\t%d\n", c.PublishedAtNs)

	fmt.Fprintf(tw, "\nresource attributes (%d)\n", len(c.Resource.Attributes))
	writeAttributes(tw, sortedByKey(c.Resource.Attributes))
	if c.Resource.DroppedAttributesCount > 0 {
		fmt.Fprintf(tw, "  dropped_attributes_count\t%d\n", c.Resource.DroppedAttributesCount)
	}

	fmt.Fprintf(tw, "\nattributes (%d)\n", len(c.Attributes))
	writeAttributes(tw, sortedByKey(c.Attributes))

	tl := c.ThreadLocal
	if tl.SchemaVersion == "" && len(tl.AttributeKeyMap) == 0 {
		fmt.Fprint(tw, "\nthreadlocal: not published\n")
	} else {
		fmt.Fprint(tw, "\nthreadlocal\n")
		fmt.Fprintf(tw, "  schema_version\t%s\n", strconv.Quote(tl.SchemaVersion))
		fmt.Fprintf(tw, "  attribute_key_map\t%d keys\n", len(tl.AttributeKeyMap))
		for i, k := range tl.AttributeKeyMap {
			fmt.Fprintf(tw, "    [%d]\t%s\n", i, strconv.Quote(k))
		}
	}

	if len(c.Resource.EntityRefs) > 0 {
		fmt.Fprintf(tw, "\nentity refs (%d)\n", len(c.Resource.EntityRefs))
		for _, r := range c.Resource.EntityRefs {
			fmt.Fprintf(tw, "  %s\tid_keys=%s description_keys=%s", cleanText(r.Type),
				textStrings(r.IDKeys), textStrings(r.DescriptionKeys))
			if r.SchemaURL != "" {
				fmt.Fprintf(tw, " schema_url=%s", cleanText(r.SchemaURL))
			}
			fmt.Fprintln(tw)
		}
	}

	if notes := limitNotes(p.DecodeStats); len(notes) > 0 {
		fmt.Fprintln(tw)
		for _, n := range notes {
			fmt.Fprintf(tw, "note: %s\n", n)
		}
	}
	return tw.Flush()
}

func writeAttributes(w io.Writer, attrs []processctx.Attribute) {
	for _, a := range attrs {
		fmt.Fprintf(w, "  %s\t%s\n", cleanText(a.Key), textValue(a.Value))
	}
}

// limitNotes explains what the reader's limits cut from the context.
func limitNotes(ds processctx.DecodeStats) []string {
	var notes []string
	if ds.DroppedAttributes > 0 {
		notes = append(notes, fmt.Sprintf("%d attribute(s) or list entries dropped by the reader's limits (count, nesting depth): the output is incomplete", ds.DroppedAttributes))
	}
	if ds.TruncatedValues > 0 {
		notes = append(notes, fmt.Sprintf("%d string or bytes value(s) truncated by the reader's length limit", ds.TruncatedValues))
	}
	if ds.DuplicateKeys > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicate key(s) in the payload; the last value of each is shown", ds.DuplicateKeys))
	}
	return notes
}

func sortedByKey(attrs []processctx.Attribute) []processctx.Attribute {
	out := slices.Clone(attrs)
	slices.SortStableFunc(out, func(a, b processctx.Attribute) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// textValue renders an AnyValue on one line: strings quoted, bytes as hex,
// arrays as [a, b], kvlists as {k: v} in published order.
func textValue(v processctx.Value) string {
	var b strings.Builder
	appendText(&b, v)
	return b.String()
}

func appendText(b *strings.Builder, v processctx.Value) {
	switch v.Kind {
	case processctx.KindStr:
		b.WriteString(strconv.Quote(v.Str))
	case processctx.KindBool:
		b.WriteString(strconv.FormatBool(v.Bool))
	case processctx.KindInt:
		b.WriteString(strconv.FormatInt(v.Int, 10))
	case processctx.KindDouble:
		b.WriteString(strconv.FormatFloat(v.Double, 'g', -1, 64))
	case processctx.KindBytes:
		fmt.Fprintf(b, "bytes(%d) 0x%s", len(v.Bytes), hex.EncodeToString(v.Bytes))
	case processctx.KindArray:
		b.WriteByte('[')
		for i := range v.Array {
			if i > 0 {
				b.WriteString(", ")
			}
			appendText(b, v.Array[i])
		}
		b.WriteByte(']')
	case processctx.KindKVList:
		b.WriteByte('{')
		for i, a := range v.KVList {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(cleanText(a.Key))
			b.WriteString(": ")
			appendText(b, a.Value)
		}
		b.WriteByte('}')
	default:
		b.WriteString("(empty)")
	}
}

func textStrings(s []string) string {
	q := make([]string, len(s))
	for i := range s {
		q[i] = cleanText(s[i])
	}
	return "[" + strings.Join(q, " ") + "]"
}

// cleanText returns s as is when it is printable and non-empty, else quoted:
// published strings must not be able to break the table layout (tabs,
// newlines) or send escape sequences to the terminal.
func cleanText(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || (r != ' ' && !unicode.IsPrint(r)) {
			return strconv.Quote(s)
		}
	}
	return s
}
