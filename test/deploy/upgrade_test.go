// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// previousConfigs are the configurations earlier versions shipped, kept as
// they were (testdata/config-VERSION): what an upgrade starts from.
const previousConfigs = "testdata"

// validateConfig runs `otelcol-otelctx validate` on path with the
// environment the shipped configurations read (the DaemonSet's and the
// unit's variables).
func validateConfig(t *testing.T, bin, path string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, "validate", "--config", path, "--feature-gates=service.profilesSupport")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OTELCTX_GATEWAY_ENDPOINT=gateway.example:4317",
		"POD_IP=127.0.0.1", "K8S_NODE_NAME=node-1"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPreviousVersionConfigs: what users of earlier versions run, against
// this version (docs/upgrading.md). The configurations 0.2 and 0.3 shipped
// validate unchanged.
// 0.1's (the format before 0.2.0) are refused with a message that names
// every key to move and where it goes; doing what the messages say makes
// them valid.
func TestPreviousVersionConfigs(t *testing.T) {
	bin := testenv.DistBinary(t)
	for _, v := range []string{"0.2", "0.3"} {
		dir := filepath.Join(previousConfigs, "config-"+v)
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if len(files) < 2 {
			t.Fatalf("%s: %d configurations, want the demo and the production one", dir, len(files))
		}
		for _, f := range files {
			if out, err := validateConfig(t, bin, f); err != nil {
				t.Errorf("%s's %s is refused: %v\n%s", v, filepath.Base(f), err, out)
			}
		}
	}

	files, _ := filepath.Glob(filepath.Join(previousConfigs, "config-0.1", "*.yaml"))
	if len(files) < 2 {
		t.Fatalf("config-0.1: %d configurations, want the demo and the Kubernetes one", len(files))
	}
	for _, f := range files {
		t.Run("0.1/"+filepath.Base(f), func(t *testing.T) { upgradeFrom01(t, bin, f) })
	}
}

// upgradeFrom01 follows the refusal messages for one 0.1 configuration.
func upgradeFrom01(t *testing.T, bin, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	receiver := section(section(cfg, "receivers"), "processctx")
	var moved []string
	for _, k := range refusedReceiverKeys {
		if _, ok := receiver[k]; ok {
			moved = append(moved, k)
		}
	}
	if len(moved) == 0 {
		t.Fatal("the 0.1 configuration sets none of the receiver's former keys")
	}

	// 1. The receiver's message names every key it sets, in one go.
	out, err := validateConfig(t, bin, path)
	if err == nil {
		t.Fatalf("accepted:\n%s", out)
	}
	for _, want := range []string{
		strings.Join(moved, ", ") + " moved from the processctx receiver to the processctx extension in otelctx 0.2.0",
		"under extensions: processctx:", "list processctx in service.extensions",
		"receiver: processctx becomes extension: processctx",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}

	// 2. Its first half done (the keys moved, the extension listed), the
	// processor's message says what is left.
	ext := map[string]any{}
	for _, k := range moved {
		ext[k] = receiver[k]
		delete(receiver, k)
	}
	setSection(cfg, "extensions", "processctx", ext)
	service := section(cfg, "service")
	exts, _ := service["extensions"].([]any)
	service["extensions"] = append(exts, "processctx")
	out, err = validateConfig(t, bin, writeYAML(t, cfg))
	if err == nil {
		t.Fatalf("accepted with ctxenrich's receiver: still set:\n%s", out)
	}
	if want := "receiver is replaced by extension: the catalog is the processctx extension's; write extension: processctx"; !strings.Contains(out, want) {
		t.Errorf("ctxenrich's refusal does not say %q:\n%s", want, out)
	}

	// 3. All of it done: valid.
	enrich := section(section(cfg, "processors"), "ctxenrich")
	enrich["extension"] = enrich["receiver"]
	delete(enrich, "receiver")
	if out, err := validateConfig(t, bin, writeYAML(t, cfg)); err != nil {
		t.Errorf("refused after doing what the messages say: %v\n%s", err, out)
	}
	if !slices.Contains(service["extensions"].([]any), any("processctx")) {
		t.Error("service.extensions lost processctx")
	}
}

// section returns m[name] as a map, creating it if absent.
func section(m map[string]any, name string) map[string]any {
	s, ok := m[name].(map[string]any)
	if !ok {
		s = map[string]any{}
		m[name] = s
	}
	return s
}

func setSection(m map[string]any, name, key string, v any) { section(m, name)[key] = v }

func writeYAML(t *testing.T, cfg map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
