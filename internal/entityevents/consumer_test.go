// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/experimentalmetricmetadata"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/pdata/plog"
)

// specGate is collector-contrib's switch between the two forms.
const specGate = "pkg.experimentalmetricmetadata.useEntityEventsSpecification"

// Both forms as collector-contrib's own decoder (pkg/experimentalmetricmetadata,
// what k8sclusterreceiver and signalfxexporter use) reads them: legacy with
// its feature gate off (its default), spec with it on. Not parallel: the gate
// is global.
func TestContribDecodesBothForms(t *testing.T) {
	p := testProcess("service.name", "checkout", "service.instance.id", "i-1", "service.version", "1.2")
	for _, spec := range []bool{false, true} {
		if err := featuregate.GlobalRegistry().Set(specGate, spec); err != nil {
			t.Fatal(err)
		}
		cl := newClaims()
		build := func(fn func(*Builder)) plog.LogRecordSlice {
			b := newEventBuilder(90*time.Second, time.Unix(1000, 0), cl)
			b.site, b.spec = testSite(t), spec
			fn(b)
			return b.logs.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
		}
		states := experimentalmetricmetadata.NewEntityEventsSliceFromLogs(build(func(b *Builder) { b.Found(p) }))
		if states.Len() != 2 {
			t.Fatalf("spec %v: %d events decoded, want 2", spec, states.Len())
		}
		for i, typ := range []string{entityTypeProcess, entityTypeServiceInst} {
			e := states.At(i)
			d := e.EntityStateDetails()
			if e.EventType() != experimentalmetricmetadata.EventTypeState || d.EntityType() != typ || d.Interval() != 90*time.Second || e.ID().Len() == 0 {
				t.Errorf("spec %v, event %d: type %v, entity %q, interval %v, id %v", spec, i, e.EventType(), d.EntityType(), d.Interval(), e.ID().AsRaw())
			}
		}
		if v, _ := states.At(0).ID().Get("host.id"); v.AsString() != "h-1" {
			t.Errorf("spec %v: process id %v lacks host.id", spec, states.At(0).ID().AsRaw())
		}
		if v, _ := states.At(1).EntityStateDetails().Attributes().Get("service.version"); v.AsString() != "1.2" {
			t.Errorf("spec %v: service.instance description %v", spec, states.At(1).EntityStateDetails().Attributes().AsRaw())
		}
		deletes := experimentalmetricmetadata.NewEntityEventsSliceFromLogs(build(func(b *Builder) { b.Lost(p) }))
		for i := 0; i < deletes.Len(); i++ {
			e := deletes.At(i)
			if e.EventType() != experimentalmetricmetadata.EventTypeDelete || e.EntityDeleteDetails().EntityType() == "" {
				t.Errorf("spec %v: delete %d: %v %q", spec, i, e.EventType(), e.EntityDeleteDetails().EntityType())
			}
			if want := map[bool]string{false: "", true: "terminated"}[spec]; e.EntityDeleteDetails().DeletionReason() != want {
				t.Errorf("spec %v: deletion reason %q, want %q", spec, e.EntityDeleteDetails().DeletionReason(), want)
			}
		}
		if deletes.Len() != 2 {
			t.Errorf("spec %v: %d deletes decoded, want 2", spec, deletes.Len())
		}
	}
	if err := featuregate.GlobalRegistry().Set(specGate, false); err != nil {
		t.Fatal(err)
	}
}
