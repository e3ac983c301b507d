// SPDX-License-Identifier: Apache-2.0

// Package otelenv reads the resource an OpenTelemetry SDK takes from its
// process's environment: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// found in a /proc/PID/environ image (NUL-separated NAME=value entries) and
// parsed as the SDK specification says. Pure functions over bytes, bounded.
//
// The rules: OTEL_RESOURCE_ATTRIBUTES is a comma-separated list of
// key=value pairs, keys and values trimmed of spaces and tabs, then
// percent-decoded; a pair that fails (no '=', an empty key, a bad %-escape,
// bytes that are not UTF-8 once decoded) discards the whole variable; empty
// list members are skipped; the last of duplicate keys wins.
// OTEL_SERVICE_NAME, when set and not empty, is service.name whatever the
// list says. As getenv does, the first entry of a duplicated variable is
// the one used.
package otelenv

import (
	"bytes"
	"unicode/utf8"
)

// The variables read.
const (
	VarServiceName        = "OTEL_SERVICE_NAME"
	VarResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES"
)

// KeyServiceName is the attribute OTEL_SERVICE_NAME sets.
const KeyServiceName = "service.name"

// Limits. The kernel caps one environment string at 128 KiB; a variable
// over MaxValueLen is dropped whole (counted) rather than cut, and so is a
// list of more than MaxAttributes distinct keys: a partial resource would
// be a guess at what the SDK kept.
const (
	MaxValueLen   = 32 << 10
	MaxAttributes = 128
)

// Attribute is one string attribute of the resource.
type Attribute struct {
	Key, Value string
}

// Stats says what was found and what was dropped, and why.
type Stats struct {
	// ServiceNameSet, AttributesSet: the variable was present.
	ServiceNameSet, AttributesSet bool
	// Oversized: variables dropped for being longer than MaxValueLen.
	Oversized int
	// Invalid: variables dropped because a pair failed to parse or decode,
	// or the service name is not UTF-8.
	Invalid int
	// TooMany: OTEL_RESOURCE_ATTRIBUTES dropped for naming more than
	// MaxAttributes keys.
	TooMany int
}

// Dropped is the number of variables dropped.
func (s Stats) Dropped() int { return s.Oversized + s.Invalid + s.TooMany }

// Resource is the parsed resource of one environment: nil Attributes when
// neither variable gave anything.
type Resource struct {
	Attributes []Attribute
	Stats      Stats
}

// Parse reads the resource from a whole environ image.
func Parse(environ []byte) Resource {
	var x Extractor
	_, _ = x.Write(environ) // never fails
	return x.Resource()
}

// ParseValues builds the resource from the variables' values (nil: not
// set).
func ParseValues(serviceName, resourceAttributes []byte) Resource {
	var r Resource
	if resourceAttributes != nil {
		r.Stats.AttributesSet = true
		attrs, fail := parseList(resourceAttributes)
		switch fail {
		case failNone:
			r.Attributes = attrs
		case failTooMany:
			r.Stats.TooMany++
		default:
			r.Stats.Invalid++
		}
	}
	if serviceName != nil {
		r.Stats.ServiceNameSet = true
		name := string(bytes.Trim(serviceName, " \t"))
		switch {
		case name == "":
		case !utf8.ValidString(name):
			r.Stats.Invalid++
		default:
			r.Attributes = put(r.Attributes, KeyServiceName, name)
		}
	}
	return r
}

type failure uint8

const (
	failNone failure = iota
	failSyntax
	failTooMany
)

// parseList parses a whole OTEL_RESOURCE_ATTRIBUTES value.
func parseList(v []byte) ([]Attribute, failure) {
	var out []Attribute
	for len(v) > 0 {
		var member []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			member, v = v[:i], v[i+1:]
		} else {
			member, v = v, nil
		}
		member = bytes.Trim(member, " \t")
		if len(member) == 0 {
			continue
		}
		eq := bytes.IndexByte(member, '=')
		if eq < 0 {
			return nil, failSyntax
		}
		k, ok := decode(bytes.Trim(member[:eq], " \t"))
		if !ok || k == "" {
			return nil, failSyntax
		}
		val, ok := decode(bytes.Trim(member[eq+1:], " \t"))
		if !ok {
			return nil, failSyntax
		}
		if !has(out, k) && len(out) == MaxAttributes {
			return nil, failTooMany
		}
		out = put(out, k, val)
	}
	return out, failNone
}

func has(attrs []Attribute, k string) bool {
	for i := range attrs {
		if attrs[i].Key == k {
			return true
		}
	}
	return false
}

// put sets k to v: the last value of a key wins, in the first one's place.
func put(attrs []Attribute, k, v string) []Attribute {
	for i := range attrs {
		if attrs[i].Key == k {
			attrs[i].Value = v
			return attrs
		}
	}
	return append(attrs, Attribute{Key: k, Value: v})
}

// decode percent-decodes b; ok is false on a malformed escape or when the
// result is not UTF-8. '+' stays '+' (this is not form encoding).
func decode(b []byte) (string, bool) {
	if bytes.IndexByte(b, '%') < 0 {
		return string(b), utf8.Valid(b)
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '%' {
			out = append(out, b[i])
			continue
		}
		if i+2 >= len(b) {
			return "", false
		}
		hi, ok1 := unhex(b[i+1])
		lo, ok2 := unhex(b[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return string(out), utf8.Valid(out)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
