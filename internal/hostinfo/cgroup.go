// SPDX-License-Identifier: Apache-2.0

package hostinfo

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Workload is where a process runs, as its cgroup path says; empty fields:
// not said.
type Workload struct {
	ContainerID string // container.id: the runtime's 64-hex id
	PodUID      string // k8s.pod.uid, with dashes
}

// maxCgroupFile bounds the read of /proc/PID/cgroup (one line per
// hierarchy; a few hundred bytes in practice).
const maxCgroupFile = 16 << 10

// WorkloadOf reads /proc/PID/cgroup under procRoot; a zero Workload when it
// cannot be read or says nothing (a host process).
func WorkloadOf(procRoot string, pid int) Workload {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return Workload{}
	}
	defer f.Close()
	b := make([]byte, maxCgroupFile)
	n, _ := f.Read(b)
	return ParseCgroup(b[:n])
}

// ParseCgroup reads a /proc/PID/cgroup file (v1 and v2 lines): the
// container id from the outermost path element a runtime names (containerd
// cri-containerd-ID.scope or cgroupfs …/ID, CRI-O crio-ID.scope, Docker
// docker-ID.scope or /docker/ID, Podman libpod-ID.scope), since whatever a
// container creates below it is inside it; and the pod UID only from a path
// the kubelet roots at /kubepods or /kubepods.slice (podUID, or the systemd
// driver's pod_UID_ with underscores), never from a delegated subtree
// (a user's, or a Delegate=yes service's), whose owner names its cgroups.
// The owner of a delegated subtree can so mislabel only its own processes.
func ParseCgroup(file []byte) Workload {
	var w Workload
	sc := bufio.NewScanner(bytes.NewReader(file))
	for sc.Scan() {
		line := sc.Text()
		// hierarchy-ID:controllers:path; the path may itself hold ':'.
		i := strings.IndexByte(line, ':')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(line[i+1:], ':')
		}
		if j < 0 {
			continue
		}
		path := line[i+1+j+1:]
		if w.ContainerID == "" {
			w.ContainerID = containerIn(path)
		}
		if w.PodUID == "" {
			w.PodUID = podIn(path)
		}
	}
	return w
}

var runtimePrefixes = []string{"cri-containerd-", "crio-", "docker-", "libpod-", "containerd-"}

// containerIn is the id of the outermost path element that is a container.
func containerIn(path string) string {
	for _, e := range strings.Split(path, "/") {
		if strings.Contains(e, "conmon") { // CRI-O's and Podman's monitor, not the container
			continue
		}
		e = strings.TrimSuffix(e, ".scope")
		if c := strings.LastIndexByte(e, ':'); c >= 0 { // …slice:cri-containerd:ID
			e = e[c+1:]
		}
		for _, p := range runtimePrefixes {
			e = strings.TrimPrefix(e, p)
		}
		if isContainerID(e) {
			return e
		}
	}
	return ""
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// podIn finds "pod" followed by a UID (dashes, or the systemd driver's
// underscores) in the kubelet's pod element of a path rooted at its
// kubepods cgroup: /kubepods[/QOS]/podUID/… or
// /kubepods.slice[/kubepods-QOS.slice]/kubepods[-QOS]-podUID.slice/….
func podIn(path string) string {
	elems := strings.Split(path, "/")
	if len(elems) < 3 || elems[0] != "" || (elems[1] != "kubepods" && elems[1] != "kubepods.slice") {
		return ""
	}
	for _, e := range elems[2:min(len(elems), 4)] {
		for i := strings.Index(e, "pod"); i >= 0; {
			if uid, ok := uidAt(e[i+3:]); ok {
				return uid
			}
			next := strings.Index(e[i+3:], "pod")
			if next < 0 {
				break
			}
			i += 3 + next
		}
	}
	return ""
}

// uidAt reads a UID (8-4-4-4-12 hex, '-' or '_' between) at the start of s.
func uidAt(s string) (string, bool) {
	const n = 36
	if len(s) < n {
		return "", false
	}
	b := []byte(s[:n])
	for i, c := range b {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' && c != '_' {
				return "", false
			}
			b[i] = '-'
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return "", false
			}
		}
	}
	return string(b), true
}
