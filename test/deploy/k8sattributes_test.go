// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// k8sattributesDir holds what the DaemonSet adds for Kubernetes metadata on
// the profiles: the collector configuration merged over the production one,
// and the RBAC k8sattributes needs.
const (
	k8sattributesConfig = "deploy/k8sattributes/otelctx-k8sattributes.yaml"
	k8sattributesRBAC   = "deploy/k8sattributes/rbac.yaml"
)

// TestK8sAttributesConfigValidates: the production configuration with the
// k8sattributes one merged over it (two --config, as the DaemonSet passes
// them) passes `otelcol-otelctx validate` with the production feature gates:
// k8sattributes and resourcedetection are in the distribution and every
// setting is known.
func TestK8sAttributesConfigValidates(t *testing.T) {
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	cmd := exec.Command(bin, "validate", "--config", filepath.Join(root, productionConfig),
		"--config", filepath.Join(root, k8sattributesConfig), productionGates)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OTELCTX_GATEWAY_ENDPOINT=gateway:4317", "K8S_NODE_NAME=node-7"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
}

// TestK8sAttributesNeedsCluster: outside Kubernetes the collector with
// k8sattributes does not start: the processor's Start fails without the
// in-cluster service account (KUBERNETES_SERVICE_HOST/PORT), which is why
// the production configuration, which the systemd unit and this host run,
// leaves it out.
func TestK8sAttributesNeedsCluster(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--config", filepath.Join(root, productionConfig),
		"--config", filepath.Join(root, k8sattributesConfig),
		"--config", productionOverlay(t, dir, freePort(t)), productionGates)
	cmd.Dir = "/"
	env := []string{"OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1", "K8S_NODE_NAME=node-7"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBERNETES_SERVICE_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	col := startProc(t, cmd)
	col.waitOutput(t, "k8sattributes' failed Start",
		regexp.MustCompile(`Could not initialize kube client.*KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined`), 60*time.Second)
	if strings.Contains(col.output(), "Everything is ready") {
		t.Fatal("the collector became ready without its k8sattributes processor")
	}
}

// TestK8sAttributesRBAC: rbac.yaml decodes strictly into its types and
// grants k8sattributes what it reads (pods, namespaces, replicasets), read
// only, to the DaemonSet's service account.
func TestK8sAttributesRBAC(t *testing.T) {
	s := kubeManifests(t)
	text := readRepoFile(t, k8sattributesRBAC)
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for _, doc := range docSeparator.Split(text, -1) {
		if isEmptyDoc(doc) {
			continue
		}
		var r rbacv1.ClusterRole
		if err := decodeStrict([]byte(doc), &r); err == nil && r.Kind == "ClusterRole" {
			role = &r
			continue
		}
		var b rbacv1.ClusterRoleBinding
		if err := decodeStrict([]byte(doc), &b); err != nil || b.Kind != "ClusterRoleBinding" {
			t.Fatalf("%s: a document that is neither a ClusterRole nor a ClusterRoleBinding (%v)", k8sattributesRBAC, err)
		}
		binding = &b
	}
	if role == nil || binding == nil {
		t.Fatalf("%s: want a ClusterRole and a ClusterRoleBinding", k8sattributesRBAC)
	}
	granted := map[string]bool{}
	for _, r := range role.Rules {
		if !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("rule %+v: verbs %v, want get, list, watch only", r, r.Verbs)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				granted[g+"/"+res] = true
			}
		}
	}
	want := map[string]bool{"/pods": true, "/namespaces": true, "apps/replicasets": true}
	if !maps.Equal(granted, want) {
		t.Errorf("granted %v, want %v", granted, want)
	}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name {
		t.Errorf("the binding refers to %+v, not the ClusterRole %s", binding.RoleRef, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
		binding.Subjects[0].Name != s.sa.Name || binding.Subjects[0].Namespace != s.sa.Namespace {
		t.Errorf("subjects %+v, want the DaemonSet's service account %s/%s", binding.Subjects, s.sa.Namespace, s.sa.Name)
	}
}
