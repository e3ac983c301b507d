// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
)

// specEvents is the sink's events in the specification's form (internal/entityevents
// tests the form itself).
func specEvents(sink *consumertest.LogsSink) (out []event) {
	for _, e := range sinkEvents(sink) {
		if e.name != "" {
			out = append(out, e)
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
	var got []event
	eventually(t, "spec entity.state events of the publisher", func() bool {
		got = specEvents(sink)
		return len(got) >= 2
	})
	for _, e := range got {
		if e.name != "entity.state" || e.res["host.id"] != host.ID || e.res["host.name"] != host.Name || e.res["k8s.node.name"] != "node-7" {
			t.Errorf("event %s, resource %v (host %+v)", e.name, e.res, host)
		}
	}
	pub.Exit()
	eventually(t, "spec entity.delete of the process", func() bool {
		for _, e := range specEvents(sink) {
			if e.name == "entity.delete" && e.rec["entity.type"] == "process" {
				return true
			}
		}
		return false
	})
}
