package hostinfo

import (
	"os"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/fuzzcorpus"
)

const (
	cid  = "3f4e1b2c9d8a7f6e5d4c3b2a19081726354a5b6c7d8e9f0a1b2c3d4e5f607182"
	uid  = "8a1c3e2f-4b5d-4c6e-9f70-a1b2c3d4e5f6"
	uidU = "8a1c3e2f_4b5d_4c6e_9f70_a1b2c3d4e5f6"
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
			"1:name=systemd:/system.slice/containerd.service/kubepods-burstable-pod" + uidU + ".slice:cri-containerd:" + cid + "\n",
			Workload{cid, uid}},
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
		{"garbage", "no colons here\n::\n0:", Workload{}},
	} {
		if got := ParseCgroup([]byte(tc.file)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// WorkloadOf reads the file of a real process: this test's own is some
// cgroup path, and parsing it gives what ParseCgroup gives.
func TestWorkloadOfSelf(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup:", err)
	}
	if got, want := WorkloadOf("/proc", os.Getpid()), ParseCgroup(b); got != want {
		t.Errorf("WorkloadOf = %+v, ParseCgroup = %+v (%s)", got, want, strings.TrimSpace(string(b)))
	}
	if got := WorkloadOf("/proc", -1); got != (Workload{}) {
		t.Errorf("unreadable: %+v", got)
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
