// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/podcgroup"
)

// Profiles carry the pod association key: samples of real processes in a
// pod's cgroup, one named by its environment alone and one publisher, get
// k8s.pod.uid and container.id on the resource the join writes, the key
// collector-contrib's k8sattributes associates pods by
// (pod_association: resource_attribute k8s.pod.uid).
func TestPodAssociationKeyOnProfiles(t *testing.T) {
	named := envProcess(t, "OTEL_SERVICE_NAME=inventory")
	published := envProcess(t, "PATH=/bin")
	cidNamed, uidNamed := podcgroup.Enter(t, named)
	cidPub, uidPub := podcgroup.Enter(t, published)
	c := testCatalog(t)
	ticks, err := procstat.StartTicks("/proc", published)
	if err != nil {
		t.Fatal(err)
	}
	// As discovery finds a publisher: its workload read from its cgroup.
	p := &publisher.Process{ID: publisher.ProcessID{PID: published, StartTicks: ticks}, UID: -1, MappingAddr: 0x1000,
		Workload: hostinfo.WorkloadOf("/proc", published)}
	p.Context.Resource.Attributes = append(p.Context.Resource.Attributes, strAttr("service.name", "checkout"))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	h := newHarness(t, c, testPolicy())

	b := newProfBuilder()
	prof := b.Resource(map[string]any{"host.name": "profiler-host"})
	now := time.Now()
	for _, pid := range []int{named, published} {
		b.Sample(prof, now, append(b.Thread(pid), b.Attr("process.pid", int64(pid)))...)
	}
	got := byPID(t, h.run(b.PD))
	for _, tc := range []struct {
		pid               int
		service, cid, uid string
	}{{named, "inventory", cidNamed, uidNamed}, {published, "checkout", cidPub, uidPub}} {
		if len(got[int64(tc.pid)]) != 1 {
			t.Fatalf("pid %d: %d samples, want 1", tc.pid, len(got[int64(tc.pid)]))
		}
		r := got[int64(tc.pid)][0]
		if r["service.name"] != tc.service || r["k8s.pod.uid"] != tc.uid || r["container.id"] != tc.cid {
			t.Errorf("pid %d's resource: %v, want service.name %s, k8s.pod.uid %s, container.id %s", tc.pid, r, tc.service, tc.uid, tc.cid)
		}
	}
}
