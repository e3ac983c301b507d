// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// hostResourceProcessor adds the host's attributes to every profile's
// resource in the production configuration.
const hostResourceProcessor = "resource_detection"

// resourceDetection is the part of resource_detection's settings these
// tests read. Override is a pointer: the processor's default is true, so
// the configuration must say false.
type resourceDetection struct {
	Detectors []string `json:"detectors"`
	Override  *bool    `json:"override"`
	System    struct {
		HostnameSources []string `json:"hostname_sources"`
	} `json:"system"`
}

// TestHostResourcePipeline: the production configuration (the systemd
// unit's, and the DaemonSet's under its Kubernetes additions) runs
// resource_detection in the profiles pipeline right after ctx_enrich and
// last, with the detectors that read only the host (env: the collector's
// OTEL_RESOURCE_ATTRIBUTES; system: host.name from the kernel, no DNS,
// and os.type), none that asks a cloud metadata endpoint or the
// Kubernetes API, and override: false, so that what the profiler, the
// process's context or ctx_enrich set wins. No other pipeline runs it.
func TestHostResourcePipeline(t *testing.T) {
	prod := parseCollectorConfig(t, productionConfig, readRepoFile(t, productionConfig))
	procs := prod.Service.Pipelines["profiles"].Processors
	i := slices.Index(procs, "ctx_enrich")
	if i < 0 || i+1 >= len(procs) || procs[i+1] != hostResourceProcessor || i+2 != len(procs) {
		t.Errorf("%s: profiles processors %v, want %s right after ctx_enrich, last", productionConfig, procs, hostResourceProcessor)
	}
	for name, p := range prod.Service.Pipelines {
		if name != "profiles" && slices.Contains(p.Processors, hostResourceProcessor) {
			t.Errorf("%s: pipeline %s runs %s", productionConfig, name, hostResourceProcessor)
		}
	}

	var rd resourceDetection
	raw, err := yaml.Marshal(prod.Processors[hostResourceProcessor])
	if err == nil {
		err = yaml.Unmarshal(raw, &rd)
	}
	if err != nil {
		t.Fatalf("%s: %s: %v", productionConfig, hostResourceProcessor, err)
	}
	if want := []string{"env", "system"}; !slices.Equal(rd.Detectors, want) {
		t.Errorf("%s detectors %v, want %v (the host's own; no metadata endpoint, no API)", hostResourceProcessor, rd.Detectors, want)
	}
	if want := []string{"os"}; !slices.Equal(rd.System.HostnameSources, want) {
		t.Errorf("%s system.hostname_sources %v, want %v (the kernel's hostname; dns, the default's first, asks the resolver)", hostResourceProcessor, rd.System.HostnameSources, want)
	}
	if rd.Override == nil || *rd.Override {
		override := "unset"
		if rd.Override != nil {
			override = "true"
		}
		t.Errorf("%s override %s, want false set (the default, true, would replace the process's and the profiler's attributes)", hostResourceProcessor, override)
	}
}
