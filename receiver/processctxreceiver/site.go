package processctxreceiver

import (
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/processctx"
)

// Where a process runs (semantic conventions).
const (
	attrHostID      = "host.id"
	attrHostName    = "host.name"
	attrK8sNodeName = "k8s.node.name"
	attrContainerID = "container.id"
	attrPodUID      = "k8s.pod.uid"
)

// site is where the watched processes run: the host's identity, read once,
// and each process's container and pod from its cgroup path, read when it
// is first announced and forgotten when it is lost. Owned by the watcher's
// poll goroutine; a nil site says nothing.
type site struct {
	host      []processctx.Attribute
	procRoot  string
	workloads map[scan.ProcessID][]processctx.Attribute
}

func newSite(h hostinfo.Host, nodeName, procRoot string) *site {
	s := &site{procRoot: procRoot, workloads: map[scan.ProcessID][]processctx.Attribute{}}
	for _, a := range [][2]string{{attrHostID, h.ID}, {attrHostName, h.Name}, {attrK8sNodeName, nodeName}} {
		if a[1] != "" {
			s.host = append(s.host, processctx.Attribute{Key: a[0], Value: str(a[1])})
		}
	}
	return s
}

// of is where p runs: the host's attributes, then its container's and pod's.
func (s *site) of(p *scan.Process) []processctx.Attribute {
	if s == nil {
		return nil
	}
	w, ok := s.workloads[p.ID]
	if !ok {
		wl := hostinfo.WorkloadOf(s.procRoot, p.ID.PID)
		w = append([]processctx.Attribute(nil), s.host...)
		if wl.ContainerID != "" {
			w = append(w, processctx.Attribute{Key: attrContainerID, Value: str(wl.ContainerID)})
		}
		if wl.PodUID != "" {
			w = append(w, processctx.Attribute{Key: attrPodUID, Value: str(wl.PodUID)})
		}
		s.workloads[p.ID] = w
	}
	return w
}

func (s *site) forget(id scan.ProcessID) {
	if s != nil {
		delete(s.workloads, id)
	}
}
