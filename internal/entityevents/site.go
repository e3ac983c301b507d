// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Where a process runs (semantic conventions).
const (
	attrHostID      = "host.id"
	attrHostName    = "host.name"
	attrK8sNodeName = "k8s.node.name"
	attrContainerID = "container.id"
	attrPodUID      = "k8s.pod.uid"
)

// site is where the watched processes run: the host's identity, read once;
// each process's container and pod are the ones the extension read from its
// cgroup path when it found it (publisher.Process.Workload). A nil site says
// nothing.
type site struct {
	host []processctx.Attribute
}

func newSite(h hostinfo.Host, nodeName string) *site {
	s := &site{}
	for _, a := range [][2]string{{attrHostID, h.ID}, {attrHostName, h.Name}, {attrK8sNodeName, nodeName}} {
		if a[1] != "" {
			s.host = append(s.host, processctx.Attribute{Key: a[0], Value: str(a[1])})
		}
	}
	return s
}

// of is where p runs: the host's attributes, then its container's and pod's.
func (s *site) of(p *publisher.Process) []processctx.Attribute {
	if s == nil {
		return nil
	}
	w := append(make([]processctx.Attribute, 0, len(s.host)+2), s.host...)
	if p.Workload.ContainerID != "" {
		w = append(w, processctx.Attribute{Key: attrContainerID, Value: str(p.Workload.ContainerID)})
	}
	if p.Workload.PodUID != "" {
		w = append(w, processctx.Attribute{Key: attrPodUID, Value: str(p.Workload.PodUID)})
	}
	return w
}
