// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

const (
	testCID = "3f4e1b2c9d8a7f6e5d4c3b2a19081726354a5b6c7d8e9f0a1b2c3d4e5f607182"
	testUID = "8a1c3e2f-4b5d-4c6e-9f70-a1b2c3d4e5f6"
)

// The process's container.id and k8s.pod.uid, as the extension read them
// from its cgroup path, reach the resource under the merge policy in place
// of the published values; a published value stands where none was read.
func TestWorkloadMerge(t *testing.T) {
	id, c := testCatalog(t)
	inPod := &publisher.Process{ID: publisher.ProcessID{PID: 100, StartTicks: 1}, CreationTime: t0,
		Workload: hostinfo.Workload{ContainerID: testCID, PodUID: testUID}}
	inPod.Context.Resource.Attributes = append(inPod.Context.Resource.Attributes, strAttr("container.id", "spoof"), strAttr("service.name", "checkout"))
	onHost := &publisher.Process{ID: publisher.ProcessID{PID: 200, StartTicks: 1}, CreationTime: t0}
	onHost.Context.Resource.Attributes = append(onHost.Context.Resource.Attributes, strAttr("container.id", "published"))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: inPod}, {Kind: publisher.Found, Process: onHost}})

	for _, tc := range []struct {
		name      string
		pid       int64
		wins      []string
		other     string
		has, want map[string]any
	}{
		{"lacking: observed values added", 100, nil, OtherKeysInsert, nil,
			map[string]any{"container.id": testCID, "k8s.pod.uid": testUID}},
		{"the profiler's container.id kept", 100, nil, OtherKeysInsert, map[string]any{"container.id": "profiler"},
			map[string]any{"container.id": "profiler", "k8s.pod.uid": testUID}},
		{"other_keys ignore: nothing added", 100, nil, OtherKeysIgnore, nil,
			map[string]any{"container.id": nil, "k8s.pod.uid": nil}},
		{"published_wins container.: the observed value replaces", 100, []string{"container."}, OtherKeysInsert, map[string]any{"container.id": "profiler"},
			map[string]any{"container.id": testCID, "k8s.pod.uid": testUID}},
		{"nothing observed: the published value by the policy", 200, nil, OtherKeysInsert, nil,
			map[string]any{"container.id": "published", "k8s.pod.uid": nil}},
	} {
		cfg := testConfig(id)
		cfg.ResourceMerge.PublishedWins, cfg.ResourceMerge.OtherKeys = tc.wins, tc.other
		sink := new(consumertest.LogsSink)
		p, err := NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, sink)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background(), testHost); err != nil {
			t.Fatal(err)
		}
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		_ = rl.Resource().Attributes().FromRaw(tc.has)
		rl.Resource().Attributes().PutInt("process.pid", tc.pid)
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(t0.Add(time.Second)))
		if err := p.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
		_ = p.Shutdown(context.Background())
		res := sink.AllLogs()[0].ResourceLogs().At(0).Resource().Attributes().AsRaw()
		for k, v := range tc.want {
			if res[k] != v {
				t.Errorf("%s: %s = %v, want %v (resource %v)", tc.name, k, res[k], v, res)
			}
		}
	}
}

// A real publisher in a real cgroup whose path names a pod and a container
// (cgroup v1, the cgroupfs driver's layout): the extension reads its
// /proc/PID/cgroup and ctxenrich puts both onto the resource of its logs.
func TestWorkloadOfRealProcess(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "in-pod")
	pub.Publish()
	cid, uid := enterPodCgroup(t, pub.PID)
	if got := hostinfo.WorkloadOf("/proc", pub.PID); got != (hostinfo.Workload{ContainerID: cid, PodUID: uid}) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pub.PID))
		t.Fatalf("the publisher's cgroup says %+v:\n%s", got, b)
	}
	p, ls := startWithExtension(t, pub.PID)
	joinedResource(t, p, ls, pub.PID, "the publisher's container and pod", func(res map[string]any) bool {
		return res["service.name"] == "in-pod" && res["container.id"] == cid && res["k8s.pod.uid"] == uid
	})
}

// enterPodCgroup moves pid into a new cgroup
// <v1 pids hierarchy>/kubepods/otelctx-test-<id>/pod<uid>/<cid> (random ids,
// the test's level in place of a QoS class: pod UIDs are read only below the
// kubelet's root) and removes what it created when the test ends.
func enterPodCgroup(t *testing.T, pid int) (cid, uid string) {
	t.Helper()
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		testenv.Missing(t, "no cgroup v1 pids hierarchy at "+root+" to put a publisher in a container's cgroup")
	}
	b := make([]byte, 48)
	_, _ = rand.Read(b)
	cid = fmt.Sprintf("%x", b[:32])
	u := fmt.Sprintf("%x", b[32:])
	uid = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	kubepods := filepath.Join(root, "kubepods")
	_, err := os.Stat(kubepods)
	keep := root // a kubepods cgroup that was there stays
	if err == nil {
		keep = kubepods
	}
	dir := filepath.Join(kubepods, "otelctx-test-"+cid[:8], "pod"+uid, cid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		testenv.Missing(t, "cannot create a cgroup (root needed): "+err.Error())
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		for d := dir; d != keep; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
	return cid, uid
}

// Profiles carry the pod association key: samples of real processes in a
// pod's cgroup, one named by its environment alone and one publisher, get
// k8s.pod.uid and container.id on the resource ctxenrich writes, the key
// collector-contrib's k8sattributes associates pods by
// (pod_association: resource_attribute k8s.pod.uid).
func TestPodAssociationKeyOnProfiles(t *testing.T) {
	named := envProcess(t, "OTEL_SERVICE_NAME=inventory")
	published := envProcess(t, "PATH=/bin")
	cidNamed, uidNamed := enterPodCgroup(t, named)
	cidPub, uidPub := enterPodCgroup(t, published)
	id, c := testCatalog(t)
	ticks, err := procstat.StartTicks("/proc", published)
	if err != nil {
		t.Fatal(err)
	}
	// As discovery finds a publisher: its workload read from its cgroup.
	p := &publisher.Process{ID: publisher.ProcessID{PID: published, StartTicks: ticks}, UID: -1, MappingAddr: 0x1000,
		Workload: hostinfo.WorkloadOf("/proc", published)}
	p.Context.Resource.Attributes = append(p.Context.Resource.Attributes, strAttr("service.name", "checkout"))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	h := newHarness(t, testConfig(id))

	b := newProfBuilder()
	prof := b.resource(map[string]any{"host.name": "profiler-host"})
	now := time.Now()
	for _, pid := range []int{named, published} {
		b.sample(prof, now, append(b.thread(pid), b.attr("process.pid", int64(pid)))...)
	}
	got := byPID(t, h.run(b.pd))
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
