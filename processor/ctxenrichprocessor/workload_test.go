// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"fmt"
	"os"
	"testing"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/testutil/podcgroup"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// A real publisher in a real cgroup whose path names a pod and a container
// (cgroup v1, the cgroupfs driver's layout): the extension reads its
// /proc/PID/cgroup and ctx_enrich puts both onto the resource of its logs.
func TestWorkloadOfRealProcess(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "in-pod")
	pub.Publish()
	cid, uid := podcgroup.Enter(t, pub.PID)
	if got := hostinfo.WorkloadOf("/proc", pub.PID); got != (hostinfo.Workload{ContainerID: cid, PodUID: uid}) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pub.PID))
		t.Fatalf("the publisher's cgroup says %+v:\n%s", got, b)
	}
	p, ls := startWithExtension(t, pub.PID)
	joinedResource(t, p, ls, pub.PID, "the publisher's container and pod", func(res map[string]any) bool {
		return res["service.name"] == "in-pod" && res["container.id"] == cid && res["k8s.pod.uid"] == uid
	})
}
