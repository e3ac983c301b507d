// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

const kubeDir = "deploy/kubernetes"

// kubeTypes are the kinds deploy/kubernetes may hold, by apiVersion and
// kind. A document of any other kind fails the test (add its type here).
var kubeTypes = map[schema.GroupVersionKind]func() runtime.Object{
	corev1.SchemeGroupVersion.WithKind("Namespace"):           func() runtime.Object { return &corev1.Namespace{} },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):      func() runtime.Object { return &corev1.ServiceAccount{} },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):           func() runtime.Object { return &corev1.ConfigMap{} },
	corev1.SchemeGroupVersion.WithKind("Service"):             func() runtime.Object { return &corev1.Service{} },
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"):           func() runtime.Object { return &appsv1.DaemonSet{} },
	schedulingv1.SchemeGroupVersion.WithKind("PriorityClass"): func() runtime.Object { return &schedulingv1.PriorityClass{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"):         func() runtime.Object { return &rbacv1.ClusterRole{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"):  func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
}

// docSeparator splits a multi-document YAML file.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// kubeObject is one decoded document.
type kubeObject struct {
	where string // file:document
	obj   runtime.Object
}

// decodeStrict decodes one YAML document into obj as the API server does:
// duplicate keys, unknown fields and fields in the wrong case (which
// encoding/json would accept) are errors, as are values of the wrong type.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

// decodeDoc decodes a document into the type of its apiVersion and kind.
func decodeDoc(doc []byte) (runtime.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, err
	}
	newObj, ok := kubeTypes[gv.WithKind(tm.Kind)]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q is not a type this test knows (kubeTypes)", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := decodeStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// kubeObjects decodes every document of every file under deploy/kubernetes.
func kubeObjects(t *testing.T) []kubeObject {
	t.Helper()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(filepath.Join(root, kubeDir), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no manifests under %s", kubeDir)
	}
	var objs []kubeObject
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		if ext := filepath.Ext(f); ext != ".yaml" && ext != ".yml" {
			t.Errorf("%s: not a .yaml manifest (kubectl apply -f %s/ would skip or refuse it)", rel, kubeDir)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			if isEmptyDoc(doc) {
				continue
			}
			where := fmt.Sprintf("%s (document %d)", rel, i+1)
			obj, err := decodeDoc([]byte(doc))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			objs = append(objs, kubeObject{where, obj})
		}
	}
	return objs
}

// isEmptyDoc: only comments and blank lines.
func isEmptyDoc(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// TestKubernetesStrictDecodingCatchesTypos: the decoding the manifests are
// checked with refuses a misspelt field, a field in the wrong case, a
// duplicate key and a value of the wrong type.
func TestKubernetesStrictDecodingCatchesTypos(t *testing.T) {
	good := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      hostPID: true\n"
	if _, err := decodeDoc([]byte(good)); err != nil {
		t.Fatalf("valid document refused: %v", err)
	}
	for name, doc := range map[string]string{
		"misspelt":   strings.Replace(good, "hostPID", "hostPIDs", 1),
		"wrong case": strings.Replace(good, "hostPID", "hostPid", 1),
		"duplicate":  strings.Replace(good, "hostPID: true\n", "hostPID: true\n      hostPID: false\n", 1),
		"type":       strings.Replace(good, "hostPID: true", "hostPID: yes please", 1),
		"kind":       strings.Replace(good, "kind: DaemonSet", "kind: DeamonSet", 1),
	} {
		if _, err := decodeDoc([]byte(doc)); err == nil {
			t.Errorf("%s: accepted:\n%s", name, doc)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestKubernetesManifestsDecode: every document of every file under
// deploy/kubernetes decodes strictly into its k8s.io/api type; the set is a
// Namespace, a ServiceAccount with its ClusterRole and binding, the
// ConfigMap, the DaemonSet and its PriorityClass (no Service: the pods
// listen for OTLP on their node's loopback), and everything namespaced is
// in the one namespace.
func TestKubernetesManifestsDecode(t *testing.T) {
	objs := kubeObjects(t)
	counts := map[string]int{}
	var ns string
	for _, o := range objs {
		if n, ok := o.obj.(*corev1.Namespace); ok {
			ns = n.Name
		}
	}
	for _, o := range objs {
		kind := fmt.Sprintf("%T", o.obj)
		counts[kind]++
		m, err := metaOf(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		if m.Name == "" {
			t.Errorf("%s: no metadata.name", o.where)
		}
		if !clusterScoped(o.obj) && m.Namespace != ns {
			t.Errorf("%s: namespace %q, want %q (the Namespace of %s)", o.where, m.Namespace, ns, kubeDir)
		}
	}
	for want, n := range map[string]int{"*v1.Namespace": 1, "*v1.ServiceAccount": 1, "*v1.ConfigMap": 1, "*v1.Service": 0, "*v1.DaemonSet": 1, "*v1.PriorityClass": 1,
		"*v1.ClusterRole": 1, "*v1.ClusterRoleBinding": 1} {
		if counts[want] != n {
			t.Errorf("%s: %d of %s, want %d", kubeDir, counts[want], want, n)
		}
	}
	// kubectl apply -f deploy/kubernetes/ applies files in name order: the
	// Namespace must come first.
	if len(objs) > 0 {
		if _, ok := objs[0].obj.(*corev1.Namespace); !ok {
			t.Errorf("the first document (%s) is not the Namespace: kubectl apply -f %s/ would fail", objs[0].where, kubeDir)
		}
	}
}

// clusterScoped: the kinds that have no namespace.
func clusterScoped(obj runtime.Object) bool {
	switch obj.(type) {
	case *corev1.Namespace, *schedulingv1.PriorityClass, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
		return true
	}
	return false
}

func metaOf(obj runtime.Object) (*metav1.ObjectMeta, error) {
	switch o := obj.(type) {
	case *schedulingv1.PriorityClass:
		return &o.ObjectMeta, nil
	case *corev1.Namespace:
		return &o.ObjectMeta, nil
	case *corev1.ServiceAccount:
		return &o.ObjectMeta, nil
	case *corev1.ConfigMap:
		return &o.ObjectMeta, nil
	case *corev1.Service:
		return &o.ObjectMeta, nil
	case *appsv1.DaemonSet:
		return &o.ObjectMeta, nil
	case *rbacv1.ClusterRole:
		return &o.ObjectMeta, nil
	case *rbacv1.ClusterRoleBinding:
		return &o.ObjectMeta, nil
	}
	return nil, fmt.Errorf("no metadata for %T", obj)
}

// kubeSet is the decoded manifests by kind.
type kubeSet struct {
	ns        *corev1.Namespace
	sa        *corev1.ServiceAccount
	cm        *corev1.ConfigMap
	pc        *schedulingv1.PriorityClass
	ds        *appsv1.DaemonSet
	role      *rbacv1.ClusterRole
	binding   *rbacv1.ClusterRoleBinding
	container *corev1.Container
}

func kubeManifests(t *testing.T) kubeSet {
	t.Helper()
	var s kubeSet
	for _, o := range kubeObjects(t) {
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			s.ns = v
		case *corev1.ServiceAccount:
			s.sa = v
		case *corev1.ConfigMap:
			s.cm = v
		case *appsv1.DaemonSet:
			s.ds = v
		case *schedulingv1.PriorityClass:
			s.pc = v
		case *rbacv1.ClusterRole:
			s.role = v
		case *rbacv1.ClusterRoleBinding:
			s.binding = v
		}
	}
	if t.Failed() || s.ns == nil || s.sa == nil || s.cm == nil || s.ds == nil || s.pc == nil || s.role == nil || s.binding == nil {
		t.Fatalf("%s does not decode into a Namespace, ServiceAccount, ClusterRole and binding, ConfigMap, DaemonSet and PriorityClass", kubeDir)
	}
	if n := len(s.ds.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("DaemonSet has %d containers, want 1", n)
	}
	s.container = &s.ds.Spec.Template.Spec.Containers[0]
	return s
}

// documentedCaps are the capabilities of docs/requirements.md's shipped
// row (capabilities per kernel family) in Kubernetes spelling.
func documentedCaps(t *testing.T) []string {
	t.Helper()
	var caps []string
	for _, c := range shippedCaps(t) {
		caps = append(caps, strings.TrimPrefix(c, "CAP_"))
	}
	return caps
}

// TestKubernetesDaemonSet: the DaemonSet is what docs/deploy.md says: host
// PID and network namespaces (TestKubernetesOTLPOnlyFromNode), not privileged, root with every capability dropped but
// exactly the documented ones (the systemd unit's, the image test's),
// no privilege escalation, a read-only root file system, only
// /sys/kernel/btf from the host (read-only), the image make image builds,
// resource requests and limits, and references that resolve (service
// account, ConfigMap, ports, labels).
func TestKubernetesDaemonSet(t *testing.T) {
	s := kubeManifests(t)
	pod := s.ds.Spec.Template.Spec
	c := s.container

	if !pod.HostPID {
		t.Error("hostPID is not true: the receiver must see the host's processes")
	}
	if pod.HostIPC {
		t.Error("hostIPC set: not needed")
	}
	if pod.ServiceAccountName != s.sa.Name {
		t.Errorf("serviceAccountName %q, the ServiceAccount is %q", pod.ServiceAccountName, s.sa.Name)
	}
	// The token is for k8s_attributes
	// (TestKubernetesRBAC: what it may read).
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken ||
		s.sa.AutomountServiceAccountToken == nil || !*s.sa.AutomountServiceAccountToken {
		t.Error("no service account token is mounted: k8s_attributes needs one to read the pods")
	}
	if s.ds.Spec.Selector == nil {
		t.Fatal("no selector")
	}
	for k, v := range s.ds.Spec.Selector.MatchLabels {
		if s.ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}

	// The image make image builds: localhost/otelctx:VERSION.
	version, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "localhost/otelctx:" + strings.TrimSpace(string(version)); c.Image != want {
		t.Errorf("image %q, make image builds %q", c.Image, want)
	}

	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the container has no securityContext.capabilities")
	}
	var added []string
	for _, a := range sc.Capabilities.Add {
		added = append(added, string(a))
	}
	slices.Sort(added)
	if want := documentedCaps(t); !slices.Equal(added, want) {
		t.Errorf("capabilities.add %v, docs/requirements.md (and %s) grant %v", added, unitPath, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	if want := strings.Split(imageCaps, ","); !slices.Equal(added, slices.Sorted(slices.Values(want))) {
		t.Errorf("capabilities.add %v, the image test (docs/deploy.md's podman run) uses %v", added, want)
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged is not false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser is not 0 (added capabilities reach a non-root process only as ambient ones, which Kubernetes does not set)")
	}
	if sc.SeccompProfile == nil {
		t.Error("no seccompProfile")
	}

	// No host path: BTF comes from the container's sysfs, so a node
	// without BTF does not block the pod (a hostPath of /sys/kernel/btf
	// fails the pod there, whatever its type: sysfs refuses mkdir).
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if hp := v.HostPath; hp != nil {
			t.Errorf("volume %s: hostPath %s: the pod must start on any node", v.Name, hp.Path)
		}
	}
	configDir := ""
	for _, m := range c.VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok {
			t.Errorf("volumeMount %s names no volume", m.Name)
			continue
		}
		if !m.ReadOnly && v.EmptyDir == nil {
			t.Errorf("volumeMount %s (%s) is not read-only", m.Name, m.MountPath)
		}
		if e := v.EmptyDir; e != nil && (e.Medium != corev1.StorageMediumMemory || e.SizeLimit == nil) {
			t.Errorf("volume %s: an emptyDir not in memory or without a size limit", v.Name)
		}
		if v.ConfigMap != nil {
			if v.ConfigMap.Name != s.cm.Name {
				t.Errorf("volume %s: ConfigMap %q, the manifests have %q", v.Name, v.ConfigMap.Name, s.cm.Name)
			}
			configDir = m.MountPath
		}
	}

	// Each --config names a key of the mounted ConfigMap.
	for _, cfgPath := range configArgs(t, c) {
		if filepath.Dir(cfgPath) != configDir {
			t.Errorf("--config %s is not in the ConfigMap's mount %q", cfgPath, configDir)
		} else if _, ok := s.cm.Data[filepath.Base(cfgPath)]; !ok {
			t.Errorf("--config %s: the ConfigMap %s has no key %s", cfgPath, s.cm.Name, filepath.Base(cfgPath))
		}
	}

	// Resource requests and limits, requests within limits.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[r]
		lim, okLim := c.Resources.Limits[r]
		if !okReq || !okLim {
			t.Errorf("resources: %s request or limit missing", r)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("resources: %s request %s above the limit %s", r, req.String(), lim.String())
		}
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		for _, e := range c.Env {
			if e.Name != "GOMEMLIMIT" {
				continue
			}
			q, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
			if err != nil {
				t.Errorf("GOMEMLIMIT=%s: %v", e.Value, err)
			} else if q.Cmp(lim) >= 0 {
				t.Errorf("GOMEMLIMIT=%s is not under the memory limit %s", e.Value, lim.String())
			}
		}
	}

	// Named ports: the probe's and the Service's target ports exist.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if pr := c.LivenessProbe; pr != nil && pr.HTTPGet != nil && pr.HTTPGet.Port.StrVal != "" {
		if _, ok := ports[pr.HTTPGet.Port.StrVal]; !ok {
			t.Errorf("livenessProbe port %s is not a container port", pr.HTTPGet.Port.StrVal)
		}
	}
}

// configArg returns the container's --config file (one, a path).
func configArg(t *testing.T, c *corev1.Container) string {
	t.Helper()
	cfg := configArgs(t, c)
	if len(cfg) != 1 {
		t.Fatalf("the container's args name %d --config files %v, want one", len(cfg), cfg)
	}
	return cfg[0]
}

// configArgs returns the container's --config files, in order (at least
// one, each an absolute path).
func configArgs(t *testing.T, c *corev1.Container) []string {
	t.Helper()
	args := append(append([]string{}, c.Command...), c.Args...)
	var cfg []string
	for i, a := range args {
		switch {
		case a == "--config" && i+1 < len(args):
			cfg = append(cfg, args[i+1])
		case strings.HasPrefix(a, "--config="):
			cfg = append(cfg, strings.TrimPrefix(a, "--config="))
		}
	}
	if len(cfg) == 0 {
		t.Fatal("the container's args name no --config file")
	}
	for _, p := range cfg {
		if !strings.HasPrefix(p, "/") {
			t.Fatalf("--config %s: not an absolute path", p)
		}
	}
	return cfg
}

// TestKubernetesConfigValidates: the ConfigMap's collector configuration
// (its files merged in the DaemonSet's order), with the DaemonSet's flags
// and environment (values from the pod's fields replaced by stand-ins),
// passes `otelcol-otelctx validate`: every component, k8s_attributes and
// resource_detection included, is in the distribution and every setting
// is known.
func TestKubernetesConfigValidates(t *testing.T) {
	s := kubeManifests(t)
	bin := testenv.DistBinary(t)
	c := s.container
	dir := t.TempDir()
	local := func(cfgPath string) string {
		p := filepath.Join(dir, filepath.Base(cfgPath))
		if err := os.WriteFile(p, []byte(s.cm.Data[filepath.Base(cfgPath)]), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{"validate"}
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		switch {
		case a == "--config" && i+1 < len(c.Args):
			args = append(args, "--config", local(c.Args[i+1]))
			i++
		case strings.HasPrefix(a, "--config="):
			args = append(args, "--config="+local(strings.TrimPrefix(a, "--config=")))
		default:
			args = append(args, a)
		}
	}
	// Stand-ins for the downward API's fields.
	env := append([]string{"PATH=" + os.Getenv("PATH")},
		containerEnv(t, c, map[string]string{"status.hostIP": "127.0.0.1", "spec.nodeName": "node-7"})...)
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
	}
}
