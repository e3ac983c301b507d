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
	"time"

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
		strings.Join(moved, ", ") + " moved from the process_ctx receiver to the process_ctx extension in otelctx 0.2.0",
		"under extensions: process_ctx:", "list process_ctx in service.extensions",
		"receiver: processctx becomes extension: process_ctx",
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
	if want := "receiver is replaced by extension: the catalog is the process_ctx extension's; write extension: processctx"; !strings.Contains(out, want) {
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

// previousTypesConfig writes every otelctx component under its type before
// 0.4.0 (processctx, ctxenrich, cputime, now deprecated aliases), the
// extension named as extName and found by the receiver and ctxenrich
// through their extension: settings, recvExt and enrichExt ("" for the
// default, process_ctx).
func previousTypesConfig(t *testing.T, extName, recvExt, enrichExt string) string {
	t.Helper()
	setting := func(ext string) string {
		if ext == "" {
			return "{}"
		}
		return "{extension: " + ext + "}"
	}
	cfg := "extensions:\n  " + extName + ": {}\n" +
		"receivers:\n  processctx: " + setting(recvExt) + "\n" +
		"  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:0\n" +
		"processors:\n  ctxenrich: " + setting(enrichExt) + "\n" +
		"connectors:\n  cputime: {}\n" +
		"exporters:\n  debug: {}\n" +
		"service:\n  telemetry:\n    metrics:\n      level: none\n" +
		"  extensions: [" + extName + "]\n  pipelines:\n" +
		"    logs:\n      receivers: [processctx]\n      exporters: [debug]\n" +
		"    profiles:\n      receivers: [otlp]\n      processors: [ctxenrich]\n      exporters: [cputime]\n" +
		"    metrics:\n      receivers: [cputime]\n      exporters: [debug]\n"
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreviousTypeNamesStartWithWarning: a configuration written with the
// types before 0.4.0 (processctx, ctxenrich, cputime) starts, and the
// collector logs for each that the alias is deprecated
// (docs/upgrading.md). The extension: settings find the extension under
// either spelling of its type: the receiver's default (process_ctx) finds
// an extension defined as processctx, and processctx/<name> finds
// process_ctx/<name>.
func TestPreviousTypeNamesStartWithWarning(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	warnings := map[string]string{"processctx": "process_ctx", "ctxenrich": "ctx_enrich", "cputime": "cpu_time"}
	for name, c := range map[string]struct{ ext, recvExt, enrichExt string }{
		"old extension, default setting": {ext: "processctx"},
		"old extension, old setting":     {ext: "processctx/host", recvExt: "processctx/host", enrichExt: "processctx/host"},
		"new extension, old setting":     {ext: "process_ctx/host", recvExt: "processctx/host", enrichExt: "processctx/host"},
	} {
		t.Run(name, func(t *testing.T) {
			path := previousTypesConfig(t, c.ext, c.recvExt, c.enrichExt)
			if out, err := validateConfig(t, bin, path); err != nil {
				t.Fatalf("refused: %v\n%s", err, out)
			}
			col := startProc(t, exec.Command(bin, "--config", path, productionGates))
			col.waitOutput(t, "the collector's start", regexp.MustCompile(`Everything is ready`), 30*time.Second)
			// The console encoder quotes the message's quotes.
			out := strings.ReplaceAll(col.output(), `\"`, `"`)
			for old, cur := range warnings {
				if want := fmt.Sprintf(`"%s" alias is deprecated; use "%s" instead`, old, cur); !strings.Contains(out, want) {
					t.Errorf("no warning %s", want)
				}
			}
		})
	}
}
