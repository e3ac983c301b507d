// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "github.com/otelctx/otelctx/internal/publisher"

// Resource attributes of a process that otelctx (and a profiler) observe
// themselves. A process's published values for them are never used: an SDK
// in a container publishes its namespace's PID, and any process may claim
// another's executable.
const (
	KeyPID            = "process.pid"
	KeyCreationTime   = "process.creation.time"
	KeyExecutableName = "process.executable.name"
	KeyExecutablePath = "process.executable.path"
)

// Observed reports whether key is one of the observed attributes, whose
// published value is ignored.
func Observed(key string) bool {
	switch key {
	case KeyPID, KeyCreationTime, KeyExecutableName, KeyExecutablePath:
		return true
	}
	return false
}

// Where a process runs, as the extension reads it from the process's cgroup
// path (publisher.Process.Workload): when known, it is the process's value for
// the key and its published one is not used; when not, the published one is.
const (
	KeyContainerID = "container.id"
	KeyPodUID      = "k8s.pod.uid"
)

// Workload gives p's observed workload attributes as key-value pairs; an
// empty value: not known.
func Workload(p *publisher.Process) [2][2]string {
	return [2][2]string{{KeyContainerID, p.Workload.ContainerID}, {KeyPodUID, p.Workload.PodUID}}
}
