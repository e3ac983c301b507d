// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// podMetaProcessors are the processors the Kubernetes configuration adds
// after ctx_enrich in the profiles pipeline, in order.
var podMetaProcessors = []string{"k8s_attributes"}

// collectorConfig is the part of a collector configuration these tests
// read.
type collectorConfig struct {
	Processors map[string]map[string]any `json:"processors"`
	Service    struct {
		Pipelines map[string]struct {
			Receivers  []string `json:"receivers"`
			Processors []string `json:"processors"`
			Exporters  []string `json:"exporters"`
		} `json:"pipelines"`
	} `json:"service"`
}

func parseCollectorConfig(t *testing.T, name, text string) collectorConfig {
	t.Helper()
	var c collectorConfig
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// podAssociation is k8s_attributes' pod_association.
type podAssociation []struct {
	Sources []struct {
		From string `json:"from"`
		Name string `json:"name"`
	} `json:"sources"`
}

// k8sAttributes is the part of k8s_attributes' settings these tests read.
type k8sAttributes struct {
	PodAssociation podAssociation `json:"pod_association"`
	Filter         struct {
		NodeFromEnvVar string `json:"node_from_env_var"`
	} `json:"filter"`
	Extract struct {
		Metadata []string `json:"metadata"`
	} `json:"extract"`
}

// TestKubernetesPodMetadataPipeline: the DaemonSet's configuration runs
// k8s_attributes in the profiles pipeline right after ctx_enrich (which
// writes k8s.pod.uid), the pipeline otherwise the production one; it
// associates pods by the resource attribute k8s.pod.uid alone, watches the
// pods of the node named by an environment variable the DaemonSet sets
// from spec.nodeName, and extracts the pod's name, namespace, workload and
// container. The production configuration (the systemd unit's, where there
// is no API server) does not use it.
func TestKubernetesPodMetadataPipeline(t *testing.T) {
	s := kubeManifests(t)
	prod := parseCollectorConfig(t, productionConfig, readRepoFile(t, productionConfig))
	paths := configArgs(t, s.container)
	kube := parseCollectorConfig(t, kubernetesConfig, s.cm.Data[filepath.Base(paths[len(paths)-1])])

	for _, name := range podMetaProcessors {
		if _, ok := prod.Processors[name]; ok {
			t.Errorf("%s configures %s: the systemd unit has no Kubernetes API", productionConfig, name)
		}
		for pl, p := range prod.Service.Pipelines {
			if slices.Contains(p.Processors, name) {
				t.Errorf("%s: pipeline %s runs %s", productionConfig, pl, name)
			}
		}
	}
	if got := slices.Collect(maps.Keys(kube.Service.Pipelines)); !slices.Equal(got, []string{"profiles"}) {
		t.Errorf("%s changes the pipelines %v, want profiles only", kubernetesConfig, got)
	}
	want := prod.Service.Pipelines["profiles"]
	i := slices.Index(want.Processors, "ctx_enrich")
	if i < 0 {
		t.Fatalf("%s: the profiles pipeline has no ctx_enrich", productionConfig)
	}
	want.Processors = slices.Insert(slices.Clone(want.Processors), i+1, podMetaProcessors...)
	got := kube.Service.Pipelines["profiles"]
	if !slices.Equal(got.Receivers, want.Receivers) || !slices.Equal(got.Processors, want.Processors) || !slices.Equal(got.Exporters, want.Exporters) {
		t.Errorf("%s: profiles pipeline %+v, want the production one with %v after ctx_enrich: %+v", kubernetesConfig, got, podMetaProcessors, want)
	}
	// The node's attributes last, so that a pod's (k8s.node.name from its
	// spec) and the process's stay (override: false).
	if k := slices.Index(got.Processors, "k8s_attributes"); k < 0 || k+1 >= len(got.Processors) || got.Processors[k+1] != hostResourceProcessor {
		t.Errorf("%s: profiles processors %v, want %s right after k8s_attributes", kubernetesConfig, got.Processors, hostResourceProcessor)
	}
	if _, ok := kube.Processors[hostResourceProcessor]; ok {
		t.Errorf("%s configures %s: its settings are the production file's, one place for the systemd unit and the DaemonSet", kubernetesConfig, hostResourceProcessor)
	}

	var ka k8sAttributes
	raw, err := yaml.Marshal(kube.Processors["k8s_attributes"])
	if err == nil {
		err = yaml.Unmarshal(raw, &ka)
	}
	if err != nil {
		t.Fatalf("%s: k8s_attributes: %v", kubernetesConfig, err)
	}
	if len(ka.PodAssociation) != 1 || len(ka.PodAssociation[0].Sources) != 1 ||
		ka.PodAssociation[0].Sources[0].From != "resource_attribute" || ka.PodAssociation[0].Sources[0].Name != "k8s.pod.uid" {
		t.Errorf("k8s_attributes pod_association %+v, want one source: resource_attribute k8s.pod.uid (what ctx_enrich writes)", ka.PodAssociation)
	}
	nodeEnv := ""
	for _, e := range s.container.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeEnv = e.Name
		}
	}
	if nodeEnv == "" || ka.Filter.NodeFromEnvVar != nodeEnv {
		t.Errorf("k8s_attributes filter.node_from_env_var %q, the DaemonSet sets the node's name in %q", ka.Filter.NodeFromEnvVar, nodeEnv)
	}
	for _, m := range []string{"k8s.pod.name", "k8s.namespace.name", "k8s.deployment.name", "k8s.container.name"} {
		if !slices.Contains(ka.Extract.Metadata, m) {
			t.Errorf("k8s_attributes extract.metadata %v lacks %s", ka.Extract.Metadata, m)
		}
	}
}

// TestKubernetesRBAC: the service account is bound to a ClusterRole that
// reads exactly what k8s_attributes reads with this configuration (pods:
// get, list, watch) and nothing else.
func TestKubernetesRBAC(t *testing.T) {
	s := kubeManifests(t)
	b := s.binding
	if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != s.role.Name || b.RoleRef.APIGroup != rbacv1.GroupName {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v, want the ClusterRole %s", b.Name, b.RoleRef, s.role.Name)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.ServiceAccountKind || b.Subjects[0].Name != s.sa.Name || b.Subjects[0].Namespace != s.sa.Namespace {
		t.Errorf("ClusterRoleBinding %s: subjects %+v, want the ServiceAccount %s/%s", b.Name, b.Subjects, s.sa.Namespace, s.sa.Name)
	}
	// resource (core group) [names] -> verbs
	got := map[string]string{}
	for _, r := range s.role.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || len(r.NonResourceURLs) > 0 {
			t.Errorf("ClusterRole rule %+v: beyond the core API group's resources", r)
			continue
		}
		for _, res := range r.Resources {
			key := res
			if len(r.ResourceNames) > 0 {
				key += " " + strings.Join(r.ResourceNames, ",")
			}
			got[key] = strings.Join(slices.Sorted(slices.Values(r.Verbs)), ",")
		}
	}
	want := map[string]string{"pods": "get,list,watch"}
	if !maps.Equal(got, want) {
		t.Errorf("ClusterRole %s grants %v, want %v (k8s_attributes: the node's pods)", s.role.Name, got, want)
	}
}
