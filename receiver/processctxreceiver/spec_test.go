// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
)

// specEvent is an event in the specification's form (the legacy form's
// records have no event name); internal/entityevents tests the form itself.
type specEvent struct {
	name     string
	res, rec map[string]any
}

func specEvents(l plog.Logs) (out []specEvent) {
	for _, rl := range l.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				if lr.EventName() != "" {
					out = append(out, specEvent{lr.EventName(), rl.Resource().Attributes().AsRaw(), lr.Attributes().AsRaw()})
				}
			}
		}
	}
	return out
}

// event_format: spec end to end: a real publisher's events come in the
// specification's form with this host's identity.
func TestSpecFormFromRealPublisher(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "checkout", "service.instance.id", "inst-1")
	pub.Publish()
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval, cfg.EventFormat, cfg.K8sNodeName = time.Hour, EventFormatSpec, "node-7"
	sink, _ := startWith(t, watchertest.FastConfig(pub.PID), cfg, nil)
	host := hostinfo.HostOf(procRoot)
	var got []specEvent
	eventually(t, "spec entity.state events of the publisher", func() bool {
		got = got[:0]
		for _, l := range sink.AllLogs() {
			got = append(got, specEvents(l)...)
		}
		return len(got) >= 2
	})
	for _, e := range got {
		if e.name != "entity.state" || e.res["host.id"] != host.ID || e.res["host.name"] != host.Name || e.res["k8s.node.name"] != "node-7" {
			t.Errorf("event %s, resource %v (host %+v)", e.name, e.res, host)
		}
	}
	pub.Exit()
	eventually(t, "spec entity.delete of the process", func() bool {
		for _, l := range sink.AllLogs() {
			for _, e := range specEvents(l) {
				if e.name == "entity.delete" && e.rec["entity.type"] == "process" {
					return true
				}
			}
		}
		return false
	})
}
