// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const profilerManifest = "deploy/profiler/kubernetes.yaml"

// profilerObjects decodes deploy/profiler/kubernetes.yaml strictly (as
// deploy/kubernetes is): its ConfigMap and DaemonSet.
func profilerObjects(t *testing.T) (*corev1.ConfigMap, *appsv1.DaemonSet) {
	t.Helper()
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	for i, doc := range docSeparator.Split(readRepoFile(t, profilerManifest), -1) {
		if isEmptyDoc(doc) {
			continue
		}
		obj, err := decodeDoc([]byte(doc))
		if err != nil {
			t.Fatalf("%s (document %d): %v", profilerManifest, i+1, err)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		default:
			t.Errorf("%s (document %d): a %T, want a ConfigMap and a DaemonSet", profilerManifest, i+1, obj)
		}
	}
	if cm == nil || ds == nil || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want a ConfigMap and a DaemonSet of one container", profilerManifest)
	}
	return cm, ds
}

// TestProfilerDaemonSet: the profiler's DaemonSet decodes strictly, runs in
// otelctx's namespace in the node's PID and network namespaces (otelctx's
// OTLP receiver is on the node's loopback), with a pinned image, its
// --config naming the mounted ConfigMap's key, and that ConfigMap holds
// deploy/profiler/otelcol-ebpf-profiler.yaml unchanged (the recipe
// TestProfilerRecipe checks); its selector selects its pods and its
// priority class is otelctx's.
func TestProfilerDaemonSet(t *testing.T) {
	cm, ds := profilerObjects(t)
	ours := kubeManifests(t)
	pod := ds.Spec.Template.Spec
	c := &pod.Containers[0]
	if ds.Namespace != ours.ns.Name || cm.Namespace != ours.ns.Name {
		t.Errorf("namespaces %q/%q, otelctx's is %q", ds.Namespace, cm.Namespace, ours.ns.Name)
	}
	if !pod.HostPID || !pod.HostNetwork {
		t.Errorf("hostPID %v hostNetwork %v, want both (otelctx listens on the node's loopback)", pod.HostPID, pod.HostNetwork)
	}
	if pod.PriorityClassName != ours.pc.Name {
		t.Errorf("priorityClassName %q, otelctx's is %q", pod.PriorityClassName, ours.pc.Name)
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not select the pod template", k, v)
		}
	}
	if i := strings.LastIndex(c.Image, ":"); i < 0 || c.Image[i+1:] == "latest" || strings.Contains(c.Image[i:], "/") {
		t.Errorf("image %q: pin a release tag", c.Image)
	}
	cfg := configArg(t, c)
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.MountPath == filepath.Dir(cfg) {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("--config %s is not in a mount of the ConfigMap %s", cfg, cm.Name)
	}
	if got, want := cm.Data[filepath.Base(cfg)], readRepoFile(t, "deploy/profiler/otelcol-ebpf-profiler.yaml"); got != want {
		t.Errorf("the ConfigMap's %s is not deploy/profiler/otelcol-ebpf-profiler.yaml (indent it by 4)", filepath.Base(cfg))
	}
}

// listenPorts are the TCP ports a collector configuration listens on: OTLP
// receivers' endpoints, extensions' endpoints and the Prometheus reader.
func listenPorts(t *testing.T, text string) map[string]string {
	t.Helper()
	var cfg struct {
		Receivers  map[string]map[string]any `json:"receivers"`
		Extensions map[string]map[string]any `json:"extensions"`
		Service    struct {
			Telemetry struct {
				Metrics struct {
					Readers []struct {
						Pull struct {
							Exporter struct {
								Prometheus struct {
									Port int `json:"port"`
								} `json:"prometheus"`
							} `json:"exporter"`
						} `json:"pull"`
					} `json:"readers"`
				} `json:"metrics"`
			} `json:"telemetry"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	add := func(what, endpoint string) {
		if i := strings.LastIndex(endpoint, ":"); i >= 0 {
			ports[endpoint[i+1:]] = what
		}
	}
	for id, r := range cfg.Receivers {
		if protos, ok := r["protocols"].(map[string]any); ok {
			for p, v := range protos {
				if m, ok := v.(map[string]any); ok {
					add("receiver "+id+" "+p, fmt.Sprint(m["endpoint"]))
				}
			}
		}
	}
	for id, e := range cfg.Extensions {
		if ep, ok := e["endpoint"].(string); ok {
			add("extension "+id, ep)
		}
		// health_check in component status mode nests it under http.
		if h, ok := e["http"].(map[string]any); ok {
			if ep, ok := h["endpoint"].(string); ok {
				add("extension "+id+" http", ep)
			}
		}
	}
	for _, r := range cfg.Service.Telemetry.Metrics.Readers {
		if p := r.Pull.Exporter.Prometheus.Port; p != 0 {
			ports[fmt.Sprint(p)] = "telemetry metrics"
		}
	}
	return ports
}

// TestHostPortPlan: otelctx's production configuration and the profiler's
// listen on different ports (both run in the host's network namespace:
// the same port on 127.0.0.1 and on the node's address clash on a host
// whose loopback metrics are the default), each DaemonSet declares its
// metrics port as its configuration has it, and docs/operating.md's port
// plan lists every one of them.
func TestHostPortPlan(t *testing.T) {
	ours := listenPorts(t, readRepoFile(t, productionConfig))
	theirs := listenPorts(t, readRepoFile(t, "deploy/profiler/otelcol-ebpf-profiler.yaml"))
	if len(ours) < 3 || len(theirs) < 1 {
		t.Fatalf("ports found: otelctx %v, profiler %v", ours, theirs)
	}
	for p, what := range theirs {
		if o, ok := ours[p]; ok {
			t.Errorf("port %s: the profiler's %s and otelctx's %s", p, what, o)
		}
	}
	_, ds := profilerObjects(t)
	for name, m := range map[string]struct {
		c     corev1.Container
		ports map[string]string
	}{"otelctx": {*kubeManifests(t).container, ours}, "profiler": {ds.Spec.Template.Spec.Containers[0], theirs}} {
		for _, cp := range m.c.Ports {
			if m.ports[fmt.Sprint(cp.ContainerPort)] == "" {
				t.Errorf("%s DaemonSet declares port %d, its configuration listens on %v", name, cp.ContainerPort, m.ports)
			}
		}
	}
	plan := readRepoFile(t, "docs/operating.md")
	for _, ports := range []map[string]string{ours, theirs} {
		for p, what := range ports {
			if !strings.Contains(plan, "| "+p+" |") {
				t.Errorf("docs/operating.md's port plan has no row for %s (%s)", p, what)
			}
		}
	}
}
