// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var envDefault = regexp.MustCompile(`^\$\{env:[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}$`)

// loopbackEndpoint reports whether a host:port (or host) listens on the
// loopback interface only.
func loopbackEndpoint(ep string) bool {
	// ${env:NAME:-default}: the default, where the environment sets none.
	if m := envDefault.FindStringSubmatch(ep); m != nil {
		ep = m[1]
	}
	host := ep
	if h, _, err := net.SplitHostPort(ep); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// valuesOf collects every string value of a key named key under v, by
// its key path ("endpoint" of receivers, "host" of telemetry readers).
func valuesOf(key, path string, v any, out map[string]string) {
	switch m := v.(type) {
	case map[string]any:
		for k, c := range m {
			p := path + "::" + k
			if s, ok := c.(string); ok && k == key {
				out[p] = s
				continue
			}
			valuesOf(key, p, c, out)
		}
	case []any:
		for _, c := range m {
			valuesOf(key, path, c, out)
		}
	}
}

// TestKubernetesOTLPOnlyFromNode: the DaemonSet's receivers take data only
// from the node itself. The pod has the host's network namespace and every
// receiver and extension of the ConfigMap's configuration listens on
// loopback (127.0.0.1): the node's profiler (hostNetwork, or a host
// process) reaches it, no pod and no other node can. No Service points at
// the pods and the only declared port is the metrics endpoint's.
func TestKubernetesOTLPOnlyFromNode(t *testing.T) {
	s := kubeManifests(t)
	pod := s.ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("hostNetwork is not true: a receiver on loopback would be the pod's own, unreachable by the node's profiler")
	}
	if pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("dnsPolicy %q: with hostNetwork, ClusterFirstWithHostNet resolves the gateway's cluster name", pod.DNSPolicy)
	}
	eps := map[string]string{}
	var receivers []map[string]any
	for _, p := range configArgs(t, s.container) {
		var cfg map[string]any
		key := filepath.Base(p)
		if err := yaml.UnmarshalStrict([]byte(s.cm.Data[key]), &cfg); err != nil {
			t.Fatalf("the ConfigMap's %s: %v", key, err)
		}
		for _, section := range []string{"receivers", "extensions"} {
			valuesOf("endpoint", key+"::"+section, cfg[section], eps)
		}
		if recv, ok := cfg["receivers"].(map[string]any); ok {
			receivers = append(receivers, recv)
		}
	}
	if len(eps) == 0 {
		t.Fatal("no endpoint in the ConfigMap's receivers: an OTLP receiver without one listens on its default")
	}
	for path, ep := range eps {
		if !loopbackEndpoint(ep) {
			t.Errorf("%s: %s is not on loopback: pods or other nodes could send to it", path, ep)
		}
	}
	// Every OTLP protocol names its endpoint (a default could change).
	for _, recv := range receivers {
		for name, r := range recv {
			if name != "otlp" && !strings.HasPrefix(name, "otlp/") {
				continue
			}
			protos, _ := r.(map[string]any)["protocols"].(map[string]any)
			for p, pc := range protos {
				if m, _ := pc.(map[string]any); m == nil || m["endpoint"] == nil {
					t.Errorf("receivers::%s::protocols::%s has no endpoint", name, p)
				}
			}
		}
	}
	for _, p := range s.container.Ports {
		if p.Name != "metrics" {
			t.Errorf("container port %s (%d) declared: only the metrics endpoint listens beyond loopback", p.Name, p.ContainerPort)
		}
	}
	t.Logf("receiver and extension endpoints: %v", eps)
}

// configKey is the ConfigMap key the container's first --config names,
// the production configuration.
func configKey(t *testing.T, s kubeSet) string {
	t.Helper()
	return filepath.Base(configArgs(t, s.container)[0])
}

// TestLoopbackEndpoint: the check above tells loopback from the rest.
func TestLoopbackEndpoint(t *testing.T) {
	for ep, want := range map[string]bool{
		"127.0.0.1:4317": true, "localhost:4317": true, "${env:H:-127.0.0.1}": true, "${env:H}": false, "[::1]:4317": true, "127.0.0.1": true,
		"0.0.0.0:4317": false, ":4317": false, "${env:NODE_IP}:4317": false, "10.0.0.1:4317": false, "[::]:4317": false,
	} {
		if got := loopbackEndpoint(ep); got != want {
			t.Errorf("loopbackEndpoint(%q) = %v, want %v", ep, got, want)
		}
	}
}

// TestHostConfigsListenOnLoopback: the configurations under config/ (the
// binary's, the image's and the systemd unit's) listen only on loopback:
// every receiver and extension endpoint, and the metrics endpoint when one
// is configured.
func TestHostConfigsListenOnLoopback(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no configurations under config/: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		eps := map[string]string{}
		for _, section := range []string{"receivers", "extensions"} {
			valuesOf("endpoint", section, cfg[section], eps)
		}
		if svc, ok := cfg["service"].(map[string]any); ok {
			valuesOf("host", "service::telemetry", svc["telemetry"], eps)
		}
		for path, ep := range eps {
			if !loopbackEndpoint(ep) {
				t.Errorf("%s: %s: %s is not on loopback", filepath.Base(f), path, ep)
			}
		}
	}
}
