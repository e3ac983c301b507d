// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/otelctx/otelctx/internal/testutil/podcgroup"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// kubeAPI stands in for the Kubernetes API server k8s_attributes reads:
// the pods (list, and a watch that adds nothing). It records the pod
// lists' field selectors and any request it does not serve.
type kubeAPI struct {
	pods   []corev1.Pod
	mu     sync.Mutex
	lists  []string // fieldSelector of each pod list or watch
	others []string // requests it answered 404
}

func (k *kubeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	switch r.URL.Path {
	case "/api/v1/pods":
		k.mu.Lock()
		k.lists = append(k.lists, q.Get("fieldSelector"))
		k.mu.Unlock()
		if q.Get("watch") != "true" {
			_ = enc.Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: k.pods})
			return
		}
		// A streaming list (sendInitialEvents) gets the pods and the
		// bookmark that ends them; then the watch stays open, quiet.
		if q.Get("sendInitialEvents") == "true" {
			for i := range k.pods {
				_ = enc.Encode(map[string]any{"type": "ADDED", "object": &k.pods[i]})
			}
			end := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: "1", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": &end})
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		k.mu.Lock()
		k.others = append(k.others, r.Method+" "+r.URL.String())
		k.mu.Unlock()
		http.NotFound(w, r)
	}
}

// kubeconfig points a client at the stand-in API server.
func kubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q}}]
users: [{name: test, user: {token: test}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, server)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// senderHost is the host.name a test's profile carries from its sender,
// which resource_detection must keep.
const senderHost = "profiler-named-host"

// checkoutPod is a Deployment's pod on node with the container cid.
func checkoutPod(node, uid, cid string) corev1.Pod {
	yes := true
	image := "registry.example/shop/checkout:1.4.2"
	return corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "checkout-7d9f8b6c5-x2x4z", Namespace: "shop", UID: types.UID(uid), ResourceVersion: "1",
			CreationTimestamp: metav1.Now(),
			Labels:            map[string]string{"app.kubernetes.io/name": "checkout", "pod-template-hash": "7d9f8b6c5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: "checkout-7d9f8b6c5", UID: "5b6c7d8e-0000-4000-8000-000000000002", Controller: &yes}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.42.0.17", StartTime: &metav1.Time{Time: time.Now()},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: image, Ready: true,
				ContainerID: "containerd://" + cid}}},
	}
}

// TestKubernetesPodMetadataOnProfiles runs the DaemonSet's configuration
// (the ConfigMap's two files, in its order) with the distribution against
// a stand-in API server: a real process in a cgroup laid out as the
// kubelet lays out a pod's, named by its environment, and a host process
// are sampled in one profile. The pod's process's resource leaves the
// pipeline with the association key ctx_enrich wrote (k8s.pod.uid,
// container.id) and what k8s_attributes found by it (pod, namespace,
// deployment, container, image, label, node); the host process's has no
// pod but its node (the DaemonSet's environment, as the kubelet resolves
// it). k8s_attributes asks for the node's pods only. resource_detection
// adds the host's name and OS type to both, and keeps a host.name the
// sender set (override: false).
func TestKubernetesPodMetadataOnProfiles(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	s := kubeManifests(t)
	inPod := testenv.Sleeper(t, "OTEL_SERVICE_NAME=checkout").Process.Pid
	onHost := testenv.Sleeper(t, "OTEL_SERVICE_NAME=node-tool").Process.Pid
	cid, uid := podcgroup.Enter(t, inPod)

	const node = "node-7"
	api := &kubeAPI{pods: []corev1.Pod{checkoutPod(node, uid, cid)}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	out := filepath.Join(dir, "profiles.jsonl")
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	health := freePort(t)
	overlay := filepath.Join(dir, "kube-test.yaml")
	// The API from a kubeconfig instead of the pod's service account; the
	// profiles to a file.
	if err := os.WriteFile(overlay, []byte(fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
processors:
  k8s_attributes:
    auth_type: kubeConfig
exporters:
  file/profiles:
    path: %s
service:
  pipelines:
    profiles:
      exporters: [file/profiles, cpu_time]
`, grpcAddr, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{}
	for _, p := range configArgs(t, s.container) {
		local := filepath.Join(dir, filepath.Base(p))
		if err := os.WriteFile(local, []byte(s.cm.Data[filepath.Base(p)]), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", local)
	}
	args = append(args, "--config", productionOverlay(t, dir, health), "--config", overlay, productionGates,
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d,%d]", inPod, onHost))
	cmd := exec.Command(bin, args...)
	// The DaemonSet's environment, as the kubelet resolves it on node.
	cmd.Env = append(os.Environ(), containerEnv(t, s.container, map[string]string{"spec.nodeName": node, "status.hostIP": "127.0.0.1"})...)
	cmd.Env = append(cmd.Env, "OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1", "KUBECONFIG="+kubeconfig(t, dir, srv.URL))
	col := startProc(t, cmd)
	waitFor(t, 60*time.Second, "health_check 200 (every component started)", func() bool {
		return !col.exited() && healthStatus(health) == http.StatusOK
	})

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := pprofileotlp.NewGRPCClient(conn)
	// A profile a poll, until one leaves with the pod's metadata: discovery
	// and the pod informer's first list may both come after the first.
	sent := 0
	var got map[int64]map[string]any
	waitFor(t, 60*time.Second, "a profile whose pod process's resource has k8s.pod.name", func() bool {
		if col.exited() {
			t.Fatalf("the collector exited:\n%s", col.output())
		}
		sent++
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pd := podProfile(fmt.Sprint(sent), inPod, onHost)
		// As a profiler that names its host does, on the host process's
		// resource only.
		pd.ResourceProfiles().At(1).Resource().Attributes().PutStr("host.name", senderHost)
		if _, err := client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd)); err != nil {
			t.Logf("export %d: %v", sent, err)
			return false
		}
		got = lastResources(t, out)
		_, ok := got[int64(inPod)]["k8s.pod.name"]
		return ok
	})
	want := map[string]any{
		"k8s.pod.uid": uid, "container.id": cid, "service.name": "checkout",
		"k8s.pod.name": "checkout-7d9f8b6c5-x2x4z", "k8s.namespace.name": "shop", "k8s.deployment.name": "checkout",
		"k8s.replicaset.name": "checkout-7d9f8b6c5", "k8s.container.name": "app", "app.kubernetes.io/name": "checkout",
		"container.image.name": "registry.example/shop/checkout", "container.image.tag": "1.4.2", "k8s.node.name": node,
	}
	res := got[int64(inPod)]
	for k, v := range want {
		if res[k] != v {
			t.Errorf("the pod process's resource: %s = %v, want %v", k, res[k], v)
		}
	}
	host := got[int64(onHost)]
	if host["service.name"] != "node-tool" || host["k8s.node.name"] != node {
		t.Errorf("the host process's resource %v: want service.name node-tool, k8s.node.name %s (the DaemonSet's OTEL_RESOURCE_ATTRIBUTES)", host, node)
	}
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what     string
		res      map[string]any
		hostName string
	}{{"the pod process's", res, hostname}, {"the host process's", host, senderHost}} {
		if c.res["host.name"] != c.hostName || c.res["os.type"] != "linux" {
			t.Errorf("%s resource: host.name %v, os.type %v, want %s, linux (resource_detection, override: false)",
				c.what, c.res["host.name"], c.res["os.type"], c.hostName)
		}
	}
	for _, k := range []string{"k8s.pod.uid", "container.id", "k8s.pod.name", "k8s.namespace.name"} {
		if _, ok := host[k]; ok {
			t.Errorf("the host process's resource has %s: %v", k, host)
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if want := "spec.nodeName=" + node; len(api.lists) == 0 || slices.ContainsFunc(api.lists, func(fs string) bool { return fs != want }) {
		t.Errorf("pod lists and watches with field selectors %q, want each %q (the node's pods only)", api.lists, want)
	}
	t.Logf("%d profiles sent; pod process's resource %v; requests the stand-in refused: %v", sent, res, api.others)
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", col.cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "RssAnon") || strings.HasPrefix(l, "RssFile") {
				t.Logf("collector %s", strings.Join(strings.Fields(l), " "))
			}
		}
	}
}

// podProfile is one profile of two processes, each its own resource with
// process.pid (as the OTel eBPF profiler sends them) and one sample; the
// profile's e2e.marker attribute names it.
func podProfile(marker string, pids ...int) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	dict.StringTable().Append("", "e2e.marker", "samples", "count")
	for _, add := range []func(){
		func() { dict.AttributeTable().AppendEmpty() }, func() { dict.LinkTable().AppendEmpty() },
		func() { dict.StackTable().AppendEmpty() }, func() { dict.LocationTable().AppendEmpty() },
		func() { dict.FunctionTable().AppendEmpty() }, func() { dict.MappingTable().AppendEmpty() },
	} {
		add()
	}
	m := dict.AttributeTable().AppendEmpty()
	m.SetKeyStrindex(1)
	m.Value().SetStr(marker)
	now := time.Now()
	for _, pid := range pids {
		rp := pd.ResourceProfiles().AppendEmpty()
		rp.Resource().Attributes().PutInt("process.pid", int64(pid))
		prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
		prof.SampleType().SetTypeStrindex(2)
		prof.SampleType().SetUnitStrindex(3)
		prof.AttributeIndices().Append(1)
		prof.SetTime(pcommon.NewTimestampFromTime(now))
		prof.Samples().AppendEmpty().TimestampsUnixNano().Append(uint64(now.UnixNano()))
	}
	return pd
}

// lastResources reads the file exporter's output (OTLP JSON, a batch a
// line) and returns the last resource written for each process.pid.
func lastResources(t *testing.T, path string) map[int64]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]map[string]any{}
	var um pprofile.JSONUnmarshaler
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		pd, err := um.UnmarshalProfiles([]byte(line))
		if err != nil {
			continue // a line the exporter is still writing
		}
		for _, rp := range pd.ResourceProfiles().All() {
			attrs := rp.Resource().Attributes().AsRaw()
			if pid, ok := attrs["process.pid"].(int64); ok {
				got[pid] = attrs
			}
		}
	}
	return got
}

// containerEnv is c's environment as the kubelet resolves it: values with
// $(VAR) references to the variables before them, and the downward API's
// fields from fields.
func containerEnv(t *testing.T, c *corev1.Container, fields map[string]string) []string {
	t.Helper()
	vars := map[string]string{}
	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			for name, val := range vars {
				v = strings.ReplaceAll(v, "$("+name+")", val)
			}
		case e.ValueFrom.FieldRef != nil:
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("env %s: field %s not given", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			t.Fatalf("env %s: only values and field references are resolved here", e.Name)
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}
