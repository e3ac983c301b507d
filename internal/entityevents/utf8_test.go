// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// TestEntityEventsValidUTF8: whatever strings a Process holds (the decoder
// replaces invalid UTF-8; an executable's path is not decoded), every key
// and string of its entity events is valid UTF-8, in both event forms.
func TestEntityEventsValidUTF8(t *testing.T) {
	for _, spec := range []bool{false, true} {
		p := testProcess("service.name", "checkout\xff", "service.instance.id", "i\xc3", "k\xfe", "v")
		p.ExecutablePath, p.ExecutableName = "/tmp/a\n\xff", "a\n\xff"
		p.Context.Resource.EntityRefs = []processctx.EntityRef{{Type: "svc\xff", IDKeys: []string{"service.name", "k\xfe"}}}
		b := newEventBuilder(5*time.Minute, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), newClaims())
		b.spec = spec
		if spec {
			b.site = testSite(t)
		}
		b.Found(p)
		b.Lost(p)
		if n := checkValidUTF8(t, b.logs); n == 0 {
			t.Fatalf("spec=%t: no strings checked", spec)
		}
		if lrs := b.logs.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords(); lrs.Len() == 0 {
			t.Fatalf("spec=%t: no events", spec)
		}
	}
}

// checkValidUTF8 fails t if any key, string value or event name of logs is
// not valid UTF-8, and returns how many it checked.
func checkValidUTF8(t testing.TB, logs plog.Logs) int {
	t.Helper()
	n := 0
	var value func(where string, v pcommon.Value)
	attrs := func(where string, m pcommon.Map) {
		for k, v := range m.All() {
			n++
			if !utf8.ValidString(k) {
				t.Errorf("%s: key %q", where, k)
			}
			value(where+"."+k, v)
		}
	}
	value = func(where string, v pcommon.Value) {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			if !utf8.ValidString(v.Str()) {
				t.Errorf("%s = %q", where, v.Str())
			}
		case pcommon.ValueTypeMap:
			attrs(where, v.Map())
		case pcommon.ValueTypeSlice:
			for _, e := range v.Slice().All() {
				value(where+"[]", e)
			}
		}
	}
	for _, rl := range logs.ResourceLogs().All() {
		attrs("resource", rl.Resource().Attributes())
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				if !utf8.ValidString(lr.EventName()) {
					t.Errorf("event name %q", lr.EventName())
				}
				attrs("record", lr.Attributes())
			}
		}
	}
	return n
}
