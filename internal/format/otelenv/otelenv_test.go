// SPDX-License-Identifier: Apache-2.0

package otelenv

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func env(entries ...string) []byte { return []byte(strings.Join(entries, "\x00") + "\x00") }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		environ []byte
		want    []Attribute
		stats   Stats
	}{
		{"neither", env("PATH=/bin", "HOME=/root"), nil, Stats{}},
		{"service name only", env("PATH=/bin", "OTEL_SERVICE_NAME=checkout"), []Attribute{{"service.name", "checkout"}}, Stats{ServiceNameSet: true}},
		{"list", env("OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop, deployment.environment.name = prod ,k8s.pod.uid=abc"),
			[]Attribute{{"service.namespace", "shop"}, {"deployment.environment.name", "prod"}, {"k8s.pod.uid", "abc"}}, Stats{AttributesSet: true}},
		{"percent decoding", env("OTEL_RESOURCE_ATTRIBUTES=a%2Cb=c%3Dd%20e,plus=a+b,utf=%C3%A9"),
			[]Attribute{{"a,b", "c=d e"}, {"plus", "a+b"}, {"utf", "é"}}, Stats{AttributesSet: true}},
		{"service name wins over the list", env("OTEL_RESOURCE_ATTRIBUTES=service.name=from-list,x=1", "OTEL_SERVICE_NAME=from-var"),
			[]Attribute{{"service.name", "from-var"}, {"x", "1"}}, Stats{AttributesSet: true, ServiceNameSet: true}},
		{"empty service name leaves the list's", env("OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=service.name=s"),
			[]Attribute{{"service.name", "s"}}, Stats{AttributesSet: true, ServiceNameSet: true}},
		{"last duplicate wins", env("OTEL_RESOURCE_ATTRIBUTES=k=1,j=2,k=3"), []Attribute{{"k", "3"}, {"j", "2"}}, Stats{AttributesSet: true}},
		{"empty members skipped", env("OTEL_RESOURCE_ATTRIBUTES=,k=1,, ,j=,"), []Attribute{{"k", "1"}, {"j", ""}}, Stats{AttributesSet: true}},
		{"bad escape discards the whole list", env("OTEL_SERVICE_NAME=svc", "OTEL_RESOURCE_ATTRIBUTES=k=1,bad=%zz"),
			[]Attribute{{"service.name", "svc"}}, Stats{AttributesSet: true, ServiceNameSet: true, Invalid: 1}},
		{"truncated escape", env("OTEL_RESOURCE_ATTRIBUTES=k=%4"), nil, Stats{AttributesSet: true, Invalid: 1}},
		{"pair without =", env("OTEL_RESOURCE_ATTRIBUTES=k=1,novalue"), nil, Stats{AttributesSet: true, Invalid: 1}},
		{"empty key", env("OTEL_RESOURCE_ATTRIBUTES= =1"), nil, Stats{AttributesSet: true, Invalid: 1}},
		{"decoded bytes not UTF-8", env("OTEL_RESOURCE_ATTRIBUTES=k=%FF"), nil, Stats{AttributesSet: true, Invalid: 1}},
		{"service name not UTF-8", env("OTEL_SERVICE_NAME=a\xffb"), nil, Stats{ServiceNameSet: true, Invalid: 1}},
		{"first of duplicated variables", env("OTEL_SERVICE_NAME=first", "OTEL_SERVICE_NAME=second"), []Attribute{{"service.name", "first"}}, Stats{ServiceNameSet: true}},
		{"names that only start alike", env("OTEL_SERVICE_NAMES=x", "OTEL_SERVICE_NAME_=y", "XOTEL_SERVICE_NAME=z", "OTEL_SERVICE_NAME"), nil, Stats{}},
		{"no final NUL", []byte("A=1\x00OTEL_SERVICE_NAME=last"), []Attribute{{"service.name", "last"}}, Stats{ServiceNameSet: true}},
		{"oversized", env("OTEL_RESOURCE_ATTRIBUTES=k="+strings.Repeat("v", MaxValueLen), "OTEL_SERVICE_NAME=s"),
			[]Attribute{{"service.name", "s"}}, Stats{AttributesSet: true, ServiceNameSet: true, Oversized: 1}},
		{"too many keys", env("OTEL_RESOURCE_ATTRIBUTES=" + pairs(MaxAttributes+1)), nil, Stats{AttributesSet: true, TooMany: 1}},
		{"as many keys as allowed", env("OTEL_RESOURCE_ATTRIBUTES=" + pairs(MaxAttributes) + ",k0=again"), nil, Stats{AttributesSet: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Parse(tc.environ)
			if tc.name == "as many keys as allowed" {
				if len(got.Attributes) != MaxAttributes || got.Attributes[0] != (Attribute{"k0", "again"}) {
					t.Fatalf("got %d attributes, first %v", len(got.Attributes), got.Attributes[0])
				}
			} else if !reflect.DeepEqual(got.Attributes, tc.want) {
				t.Fatalf("attributes: got %q, want %q", got.Attributes, tc.want)
			}
			if got.Stats != tc.stats {
				t.Fatalf("stats: got %+v, want %+v", got.Stats, tc.stats)
			}
			// The same image in pieces of every small size.
			for size := 1; size < 40; size++ {
				var x Extractor
				for b := tc.environ; len(b) > 0; {
					n := min(size, len(b))
					_, _ = x.Write(b[:n])
					b = b[n:]
				}
				if r := x.Resource(); !reflect.DeepEqual(r, got) {
					t.Fatalf("in pieces of %d: %+v, whole: %+v", size, r, got)
				}
			}
		})
	}
}

func pairs(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "k%d=v", i)
	}
	return b.String()
}

// TestExtractorBoundedOnHugeEnvironment: 10 MB of other variables and a
// huge unrelated value keep only the two values.
func TestExtractorBoundedOnHugeEnvironment(t *testing.T) {
	var x Extractor
	big := bytes.Repeat([]byte("FILLER_VARIABLE=0123456789abcdef\x00"), 10<<20/33)
	_, _ = x.Write(big)
	_, _ = x.Write([]byte("HUGE=" + strings.Repeat("x", 1<<20) + "\x00OTEL_SERVICE_NAME=svc\x00"))
	if cap(x.name) > 2*maxPrefix {
		t.Fatalf("name buffer grew to %d", cap(x.name))
	}
	r := x.Resource()
	if !reflect.DeepEqual(r.Attributes, []Attribute{{"service.name", "svc"}}) {
		t.Fatalf("got %v", r.Attributes)
	}
}
