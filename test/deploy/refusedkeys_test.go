// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// refusedReceiverKeys are the process_ctx receiver's former settings, now
// the extension's: a receiver configuration that sets one is refused
// (TestRefusedKeysAreRefused keeps this list honest).
var refusedReceiverKeys = []string{
	"collection_interval", "discovery_interval", "recheck_interval", "exited_retention", "include", "exclude",
	"limits", "thread_sampler", "thread_context", "dd_otel_ctx",
}

// refusedInText: ctx_enrich's former receiver: key as prose or flow YAML
// shows it, under either spelling of the types (the deprecated one is
// accepted).
var refusedInText = regexp.MustCompile("(?m)\\breceiver:\\s*process_?ctx|ctx_?enrich\\s*\\(`?receiver:")

var yamlBlock = regexp.MustCompile("(?ms)^\\s*```ya?ml\\s*\\n(.*?)^\\s*```")

// ofType: id is of one of types (a component type and its deprecated
// alias), with or without a name.
func ofType(id string, types ...string) bool {
	for _, t := range types {
		if id == t || strings.HasPrefix(id, t+"/") {
			return true
		}
	}
	return false
}

// refusedKeys returns the refused keys a configuration sets.
func refusedKeys(cfg map[string]any) []string {
	var found []string
	section := func(name string) map[string]any { m, _ := cfg[name].(map[string]any); return m }
	for id, c := range section("receivers") {
		if !ofType(id, "process_ctx", "processctx") {
			continue
		}
		m, _ := c.(map[string]any)
		for _, k := range refusedReceiverKeys {
			if _, ok := m[k]; ok {
				found = append(found, "receivers::"+id+"::"+k)
			}
		}
	}
	for id, c := range section("processors") {
		if !ofType(id, "ctx_enrich", "ctxenrich") {
			continue
		}
		if m, _ := c.(map[string]any); m != nil {
			if _, ok := m["receiver"]; ok {
				found = append(found, "processors::"+id+"::receiver")
			}
		}
	}
	return found
}

// TestDocsUseNoRefusedKeys: no document (every .md file but CHANGELOG.md
// and docs/upgrading.md, which show the old form on purpose) and no shipped configuration (.yaml files
// outside testdata/) shows a key the components now refuse: the moved
// receiver settings, or ctx_enrich's receiver:. YAML blocks of Markdown
// files and YAML files are parsed; prose is searched for receiver:.
func TestDocsUseNoRefusedKeys(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_build" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		if (ext != ".md" && ext != ".yaml" && ext != ".yml") || rel == "CHANGELOG.md" || rel == filepath.Join("docs", "upgrading.md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		text := string(b)
		blocks := []string{text}
		if ext == ".md" {
			blocks = nil
			for _, m := range yamlBlock.FindAllStringSubmatch(text, -1) {
				blocks = append(blocks, m[1])
			}
			if loc := refusedInText.FindStringIndex(text); loc != nil {
				t.Errorf("%s: %q: ctx_enrich's receiver: is refused (extension: process_ctx)", rel, text[loc[0]:loc[1]])
			}
		}
		for _, blk := range blocks {
			// Kubernetes manifests hold the configuration as a string.
			for _, cfgText := range append([]string{blk}, embeddedConfigs(blk)...) {
				var cfg map[string]any
				if yaml.Unmarshal([]byte(cfgText), &cfg) != nil {
					continue // a fragment that is not a configuration
				}
				for _, k := range refusedKeys(cfg) {
					t.Errorf("%s: sets %s, which the components refuse", rel, k)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d documents checked", checked)
	}
}

// embeddedConfigs are the string values of a ConfigMap's data.
func embeddedConfigs(doc string) []string {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	var out []string
	for _, d := range docSeparator.Split(doc, -1) {
		if yaml.Unmarshal([]byte(d), &cm) == nil {
			for _, v := range cm.Data {
				out = append(out, v)
			}
		}
	}
	return out
}

// TestRefusedKeysCaught: the check above finds each kind of refused key.
func TestRefusedKeysCaught(t *testing.T) {
	for _, doc := range []string{
		"receivers:\n  process_ctx:\n    collection_interval: 5s\n",
		"receivers:\n  process_ctx/host:\n    thread_sampler: auto\n",
		"processors:\n  ctx_enrich:\n    receiver: process_ctx\n",
	} {
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		if len(refusedKeys(cfg)) != 1 {
			t.Errorf("not caught:\n%s", doc)
		}
	}
	if !refusedInText.MatchString("→ `ctx_enrich` (`receiver: process_ctx`)") {
		t.Error("prose receiver: not caught")
	}
}

// TestRefusedKeysAreRefused: the distribution refuses every key of
// refusedReceiverKeys under the receiver, and ctx_enrich's receiver:.
func TestRefusedKeysAreRefused(t *testing.T) {
	bin := testenv.DistBinary(t)
	base := "extensions:\n  process_ctx: {}\nexporters:\n  debug: {}\nservice:\n  extensions: [process_ctx]\n  pipelines:\n" +
		"    logs:\n      receivers: [process_ctx]\n      exporters: [debug]\n"
	dir := t.TempDir()
	try := func(name, cfg string) {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "validate", "--config", p).CombinedOutput(); err == nil {
			t.Errorf("%s accepted:\n%s", name, out)
		}
	}
	// The base alone is valid: a refusal below is the key's.
	p := filepath.Join(dir, "base.yaml")
	if err := os.WriteFile(p, []byte(base+"receivers:\n  process_ctx: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "validate", "--config", p).CombinedOutput(); err != nil {
		t.Fatalf("the base configuration is refused: %v\n%s", err, out)
	}
	for _, k := range refusedReceiverKeys {
		try(k, base+"receivers:\n  process_ctx:\n    "+k+": {}\n")
	}
	try("ctx_enrich receiver", base+"receivers:\n  process_ctx: {}\nprocessors:\n  ctx_enrich:\n    receiver: process_ctx\n")
}
