// SPDX-License-Identifier: Apache-2.0

package otelenv

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzParse: any environ image gives a bounded resource of valid UTF-8,
// the same whether it is written whole or in two pieces.
func FuzzParse(f *testing.F) {
	f.Add([]byte("OTEL_SERVICE_NAME=a\x00OTEL_RESOURCE_ATTRIBUTES=k=v,x=%41\x00"), uint16(7))
	f.Add([]byte("OTEL_RESOURCE_ATTRIBUTES=a=%zz\x00"), uint16(3))
	f.Fuzz(func(t *testing.T, environ []byte, cut uint16) {
		r := Parse(environ)
		if len(r.Attributes) > MaxAttributes+1 {
			t.Fatalf("%d attributes", len(r.Attributes))
		}
		seen := map[string]bool{}
		for _, a := range r.Attributes {
			if a.Key == "" || !utf8.ValidString(a.Key) || !utf8.ValidString(a.Value) || seen[a.Key] {
				t.Fatalf("bad attribute %q", a)
			}
			seen[a.Key] = true
		}
		i := int(cut) % (len(environ) + 1)
		var x Extractor
		_, _ = x.Write(environ[:i])
		_, _ = x.Write(environ[i:])
		if got := x.Resource(); !reflect.DeepEqual(got, r) {
			t.Fatalf("split at %d: %+v, whole: %+v", i, got, r)
		}
	})
}
