// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

const (
	oneBinaryRecipe = "deploy/profiler/builder-config-one-binary.yaml"
	oneBinaryConfig = "deploy/profiler/otelctx-one-binary.yaml"
	// profilerModule is the one component the one binary adds.
	profilerModule = "go.opentelemetry.io/ebpf-profiler"
)

// builderComponent is one entry of an ocb component list.
type builderComponent struct {
	GoMod  string `json:"gomod"`
	Import string `json:"import,omitempty"`
	Path   string `json:"path,omitempty"`
}

type builderManifest struct {
	Extensions []builderComponent `json:"extensions"`
	Receivers  []builderComponent `json:"receivers"`
	Processors []builderComponent `json:"processors"`
	Connectors []builderComponent `json:"connectors"`
	Exporters  []builderComponent `json:"exporters"`
	Replaces   []string           `json:"replaces"`
}

// TestOneBinaryRecipe: the one binary (the profiler's receiver and
// otelctx's components) keeps up with the distribution. Its components are
// builder-config.yaml's plus the profiler's receiver; its configuration is
// the production one with the `profiling` receiver in place of the OTLP
// one, sets only the receiver's keys, and validates with the distribution
// when the receiver is swapped back.
func TestOneBinaryRecipe(t *testing.T) {
	var dist, one builderManifest
	for path, m := range map[string]*builderManifest{"builder-config.yaml": &dist, oneBinaryRecipe: &one} {
		if err := yaml.Unmarshal([]byte(readRepoFile(t, path)), m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var added []builderComponent
	for _, kind := range []struct {
		name      string
		dist, one []builderComponent
	}{
		{"extensions", dist.Extensions, one.Extensions}, {"receivers", dist.Receivers, one.Receivers},
		{"processors", dist.Processors, one.Processors}, {"connectors", dist.Connectors, one.Connectors},
		{"exporters", dist.Exporters, one.Exporters},
	} {
		for _, c := range kind.dist {
			if !slices.Contains(kind.one, c) {
				t.Errorf("%s: %s lacks the distribution's %s %s", oneBinaryRecipe, kind.name, c.GoMod, c.Import)
			}
		}
		for _, c := range kind.one {
			if !slices.Contains(kind.dist, c) {
				added = append(added, c)
				if kind.name != "receivers" || filepath.Dir(c.Import) != profilerModule {
					t.Errorf("%s: %s has %s %s, which the distribution has not", oneBinaryRecipe, kind.name, c.GoMod, c.Import)
				}
			}
		}
	}
	if len(added) != 1 {
		t.Errorf("%s adds %v to the distribution, want the profiler's receiver alone", oneBinaryRecipe, added)
	}
	if !slices.Equal(dist.Replaces, one.Replaces) {
		t.Errorf("%s: replaces %v, the distribution's %v", oneBinaryRecipe, one.Replaces, dist.Replaces)
	}

	var prod, cfg map[string]any
	for path, m := range map[string]*map[string]any{productionConfig: &prod, oneBinaryConfig: &cfg} {
		if err := yaml.UnmarshalStrict([]byte(readRepoFile(t, path)), m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	prof, ok := cfg["receivers"].(map[string]any)["profiling"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no profiling receiver", oneBinaryConfig)
	}
	for k := range prof {
		if !slices.Contains(profilingKeys, k) {
			t.Errorf("receivers::profiling::%s is not a setting of the profiling receiver", k)
		}
	}
	// The production configuration, its OTLP receiver swapped for the
	// profiler's, is the one binary's.
	want := swapReceiver(prod, "otlp", "profiling", prof)
	if !reflect.DeepEqual(want, cfg) {
		w, _ := yaml.Marshal(want)
		g, _ := yaml.Marshal(cfg)
		t.Errorf("%s is not %s with the profiling receiver in place of otlp:\nwant\n%s\ngot\n%s", oneBinaryConfig, productionConfig, w, g)
	}

	bin := testenv.DistBinary(t)
	back := swapReceiver(cfg, "profiling", "otlp", map[string]any{"protocols": map[string]any{"grpc": map[string]any{"endpoint": "127.0.0.1:0"}}})
	path := writeYAML(t, back)
	cmd := exec.Command(bin, "validate", "--config", path, productionGates)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OTELCTX_GATEWAY_ENDPOINT=gateway.example:4317"}
	if out, err := cmd.CombinedOutput(); err != nil {
		b, _ := os.ReadFile(path)
		t.Errorf("validate (profiling receiver swapped for otlp): %v\n%s\n%s", err, out, b)
	}
}

// swapReceiver is a deep copy of cfg whose receiver from is replaced by
// to (with settings), in its definition and in every pipeline.
func swapReceiver(cfg map[string]any, from, to string, settings map[string]any) map[string]any {
	b, _ := yaml.Marshal(cfg)
	var out map[string]any
	_ = yaml.Unmarshal(b, &out)
	recv := out["receivers"].(map[string]any)
	delete(recv, from)
	recv[to] = settings
	for _, p := range out["service"].(map[string]any)["pipelines"].(map[string]any) {
		rs, _ := p.(map[string]any)["receivers"].([]any)
		for i, r := range rs {
			if r == from {
				rs[i] = to
			}
		}
	}
	return out
}
