// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// TestEntityEventsValidUTF8: whatever strings a Process holds (the decoder
// replaces invalid UTF-8; an executable's path is not decoded), every key
// and string of its entity events is valid UTF-8.
func TestEntityEventsValidUTF8(t *testing.T) {
	p := testProcess("service.name", "checkout\xff", "service.instance.id", "i\xc3", "k\xfe", "v")
	p.ExecutablePath, p.ExecutableName = "/tmp/a\n\xff", "a\n\xff"
	p.Context.Resource.EntityRefs = []processctx.EntityRef{{Type: "svc\xff", IDKeys: []string{"service.name"}}}
	b := newEventBuilder(5*time.Minute, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), newClaims())
	b.found(p)
	n := 0
	var check func(m pcommon.Map)
	check = func(m pcommon.Map) {
		for k, v := range m.All() {
			n++
			if !utf8.ValidString(k) || (v.Type() == pcommon.ValueTypeStr && !utf8.ValidString(v.Str())) {
				t.Errorf("%q = %q", k, v.AsString())
			}
			if v.Type() == pcommon.ValueTypeMap {
				check(v.Map())
			}
		}
	}
	rl := b.logs.ResourceLogs().At(0)
	check(rl.Resource().Attributes())
	lrs := rl.ScopeLogs().At(0).LogRecords()
	for i := range lrs.Len() {
		check(lrs.At(i).Attributes())
	}
	if lrs.Len() != 1 || n == 0 {
		t.Fatalf("%d events, %d attributes", lrs.Len(), n)
	}
}
