// SPDX-License-Identifier: Apache-2.0

package hostinfo

import (
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"
)

const (
	cid  = "3f4e1b2c9d8a7f6e5d4c3b2a19081726354a5b6c7d8e9f0a1b2c3d4e5f607182"
	uid  = "8a1c3e2f-4b5d-4c6e-9f70-a1b2c3d4e5f6"
	uidU = "8a1c3e2f_4b5d_4c6e_9f70_a1b2c3d4e5f6"

	victimCID = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
	victimUID = "1b2c3d4e-5f60-4a1b-8c2d-3e4f5a6b7c8d"
)

// Real /proc/PID/cgroup shapes (ids replaced) of the runtimes and drivers
// a node runs, cgroup v2 and v1.
func TestParseCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       Workload
	}{
		{"containerd systemd driver v2 (burstable)",
			"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			Workload{cid, uid}},
		{"containerd systemd driver v2 (guaranteed)",
			"0::/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			Workload{cid, uid}},
		{"CRI-O v2 (besteffort)",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope\n",
			Workload{cid, uid}},
		{"CRI-O conmon: the pod, not a container",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope\n",
			Workload{"", uid}},
		{"containerd cgroupfs driver v1",
			"12:pids:/kubepods/burstable/pod" + uid + "/" + cid + "\n11:memory:/kubepods/burstable/pod" + uid + "/" + cid +
				"\n1:name=systemd:/kubepods/burstable/pod" + uid + "/" + cid + "\n0::/\n",
			Workload{cid, uid}},
		{"containerd v1, systemd driver with the cri-containerd separator",
			"11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n" +
				"1:name=systemd:/system.slice/containerd.service/kubepods-burstable-pod" + uidU + ".slice:cri-containerd:" + cid + "\n",
			Workload{cid, uid}},
		{"the separator form alone, under containerd's delegated service: no pod",
			"1:name=systemd:/system.slice/containerd.service/kubepods-burstable-pod" + uidU + ".slice:cri-containerd:" + cid + "\n",
			Workload{cid, ""}},
		{"Docker v1",
			"11:cpu,cpuacct:/docker/" + cid + "\n2:devices:/docker/" + cid + "\n",
			Workload{cid, ""}},
		{"Docker v2 systemd driver",
			"0::/system.slice/docker-" + cid + ".scope\n",
			Workload{cid, ""}},
		{"Podman rootless v2",
			"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid + ".scope/container\n",
			Workload{cid, ""}},
		{"systemd service", "0::/system.slice/sshd.service\n", Workload{}},
		{"login session", "0::/user.slice/user-1000.slice/session-3.scope\n", Workload{}},
		{"private cgroup namespace", "0::/\n", Workload{}},
		{"a pod-like name outside kubepods", "0::/system.slice/pod" + uid + ".service\n", Workload{}},
		{"a kubepods-like name in a user's delegated subtree",
			"0::/user.slice/user-1000.slice/user@1000.service/kubepods-pod" + uidU + ".slice/x.scope\n", Workload{}},
		{"a container's own child cgroup named after another container",
			"0::/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope/docker-" + victimCID + ".scope\n",
			Workload{cid, uid}},
		{"a cgroupfs container's child named after another container and pod",
			"11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "/pod" + victimUID + "/" + victimCID + "\n",
			Workload{cid, uid}},
		{"a systemd container's child named after another pod",
			"0::/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope/kubepods-pod" + victimUID + ".slice/x\n",
			Workload{cid, uid}},
		{"a kubepods-like path in a delegated system service",
			"0::/system.slice/foo.service/kubepods/pod" + victimUID + "/x\n", Workload{}},
		{"a kubepods.slice-like path in a delegated system service",
			"0::/system.slice/foo.service/kubepods.slice/kubepods-pod" + victimUID + ".slice/x.scope\n", Workload{}},
		{"a pod element below the kubelet's levels",
			"0::/kubepods/besteffort/x/pod" + victimUID + "\n", Workload{}},
		{"garbage", "no colons here\n::\n0:", Workload{}},
	} {
		if got := ParseCgroup([]byte(tc.file)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// WorkloadOf reads PID/cgroup under a proc root: files of a containerd
// pod (v2), a Docker container (v1) and a host service in testdata/proc;
// a missing file is no workload.
func TestWorkloadOf(t *testing.T) {
	for pid, want := range map[int]Workload{
		101: {cid, uid},
		102: {cid, ""},
		103: {},
		104: {}, // no such file
		-1:  {},
	} {
		if got := WorkloadOf("testdata/proc", pid); got != want {
			t.Errorf("WorkloadOf(testdata/proc, %d) = %+v, want %+v", pid, got, want)
		}
	}
}

// FuzzParseCgroup: any file gives a well-formed id and UID or none (seeds
// in testdata/fuzz, kept by TestSeedCorpus).
func FuzzParseCgroup(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		w := ParseCgroup(b)
		if w.ContainerID != "" && !isContainerID(w.ContainerID) {
			t.Fatalf("container id %q", w.ContainerID)
		}
		if w.PodUID != "" && len(w.PodUID) != 36 {
			t.Fatalf("pod uid %q", w.PodUID)
		}
	})
}

func TestSeedCorpus(t *testing.T) {
	fuzzcorpus.Check(t, "./internal/hostinfo", fuzzcorpus.Seeds{"FuzzParseCgroup": {
		"containerd-v2": {[]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n")},
		"cgroupfs-v1":   {[]byte("11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n1:name=systemd:/kubepods/burstable/pod" + uid + "/" + cid + "\n")},
		"crio-conmon":   {[]byte("0::/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope\n")},
		"docker-v1":     {[]byte("11:cpu,cpuacct:/docker/" + cid + "\n")},
		"host":          {[]byte("0::/system.slice/sshd.service\n")},
	}})
}
