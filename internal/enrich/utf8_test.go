// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"testing"
	"time"
	"unicode/utf8"
)

// TestInvalidUTF8NeverEnriched: resource attributes and record attributes
// that hold invalid UTF-8 (the readers replace it; this catalog is filled
// by hand, as a reader that forgot would) reach the profile as valid UTF-8.
func TestInvalidUTF8NeverEnriched(t *testing.T) {
	c := testCatalog(t)
	addProcess(c, 100, t0, "checkout", strAttr("service.name", "checkout\xff"), strAttr("team\xc3", "payments"))
	rec := span(100, 101, 0xa, 0x1, t0.Add(time.Second), map[string]string{"http.route\xed\xa0\x80": "/pay\xfe"})
	observe(t, c, 100, 101, rec, t0.Add(time.Second), t0.Add(2*time.Second))

	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	b.Sample(p, t0.Add(1500*time.Millisecond), b.Thread(101)...)
	out := newHarness(t, c, testPolicy()).run(b.PD)

	for k, v := range out.ResourceProfiles().At(0).Resource().Attributes().All() {
		if !utf8.ValidString(k) || !utf8.ValidString(v.AsString()) {
			t.Errorf("resource attribute %q = %q", k, v.AsString())
		}
	}
	a := sampleAttrs(t, out, sampleAt(out, 0, 0))
	if a["http.route\uFFFD"] != "/pay\uFFFD" {
		t.Errorf("sample attributes %q", a)
	}
	for k, v := range a {
		if s, _ := v.(string); !utf8.ValidString(k) || !utf8.ValidString(s) {
			t.Errorf("sample attribute %q = %q", k, v)
		}
	}
}
