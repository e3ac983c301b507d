// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"encoding"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/connector/cputimeconnector"
	"github.com/otelctx/otelctx/extension/decodebudgetextension"
	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor"
	"github.com/otelctx/otelctx/receiver/processctxreceiver"
)

// componentDoc is a configurable component's README and its default
// configuration.
type componentDoc struct {
	readme string
	config component.Config
}

// components are the configurable components.
var components = []componentDoc{
	{"extension/processctxextension/README.md", processctxextension.NewFactory().CreateDefaultConfig()},
	{"receiver/processctxreceiver/README.md", processctxreceiver.NewFactory().CreateDefaultConfig()},
	{"processor/ctxenrichprocessor/README.md", ctxenrichprocessor.NewFactory().CreateDefaultConfig()},
	{"connector/cputimeconnector/README.md", cputimeconnector.NewFactory().CreateDefaultConfig()},
	{"extension/decodebudgetextension/README.md", decodebudgetextension.NewFactory().CreateDefaultConfig()},
}

// removed marks a settings row of a key that is refused (a former setting).
const removed = "—"

// setting is one leaf of a configuration: its dotted key and default value.
type setting struct {
	key string
	val reflect.Value
}

// settings flattens cfg along its mapstructure tags.
func settings(prefix string, v reflect.Value) []setting {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.Type().Implements(reflect.TypeFor[encoding.TextMarshaler]()) ||
		reflect.PointerTo(v.Type()).Implements(reflect.TypeFor[encoding.TextMarshaler]()) {
		return []setting{{prefix, v}}
	}
	var out []setting
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if !f.IsExported() || tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		out = append(out, settings(key, v.Field(i))...)
	}
	return out
}

// settingsTable reads the first table under "## Configuration" whose
// header starts with | key | default |: key → default, both without
// backticks.
func settingsTable(t *testing.T, readme string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), readme))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatalf("%s: no \"## Configuration\" section", readme)
	}
	rows := map[string]string{}
	inTable := false
	for line := range strings.Lines(after) {
		line = strings.TrimSpace(line)
		cells := strings.Split(strings.Trim(line, "|"), "|")
		switch {
		case !inTable && strings.HasPrefix(line, "|") && len(cells) >= 3 &&
			strings.TrimSpace(cells[0]) == "key" && strings.TrimSpace(cells[1]) == "default":
			inTable = true
		case inTable && strings.HasPrefix(line, "|---"), inTable && strings.HasPrefix(line, "|-"):
		case inTable && strings.HasPrefix(line, "|"):
			key := strings.Trim(strings.TrimSpace(cells[0]), "`")
			rows[key] = strings.Trim(strings.TrimSpace(cells[1]), "`")
		case inTable:
			return rows
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no | key | default | table under Configuration", readme)
	}
	return rows
}

// sameDefault says whether a table's default (as written) is v.
func sameDefault(doc string, v reflect.Value) error {
	if tm, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := tm.MarshalText()
		if err != nil || string(b) != doc {
			return fmt.Errorf("the default is %q", b)
		}
		return nil
	}
	if d, ok := v.Interface().(time.Duration); ok {
		got, err := time.ParseDuration(doc)
		if err != nil || got != d {
			return fmt.Errorf("the default is %v", d)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		if doc == `""` {
			doc = ""
		}
		if doc != v.String() {
			return fmt.Errorf("the default is %q", v.String())
		}
	case reflect.Bool:
		if doc != strconv.FormatBool(v.Bool()) {
			return fmt.Errorf("the default is %v", v.Bool())
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64, reflect.Uint:
		n, err := strconv.ParseInt(strings.ReplaceAll(doc, ",", ""), 10, 64)
		want := fmt.Sprint(v.Interface())
		if err != nil || strconv.FormatInt(n, 10) != want {
			return fmt.Errorf("the default is %s", want)
		}
	case reflect.Slice:
		var elems []string
		if inner := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(doc, "["), "]")); inner != "" {
			for _, e := range strings.Split(inner, ",") {
				elems = append(elems, strings.Trim(strings.TrimSpace(e), `"`))
			}
		}
		var want []string
		for i := range v.Len() {
			want = append(want, fmt.Sprint(v.Index(i).Interface()))
		}
		if !strings.HasPrefix(doc, "[") || !slices.Equal(elems, want) {
			return fmt.Errorf("the default is %v", want)
		}
	default:
		return fmt.Errorf("a %s: the test cannot compare it", v.Kind())
	}
	return nil
}

// TestSettingsTablesMatchDefaults: every setting of each component's
// configuration has a row in its README's settings table with the default
// createDefaultConfig gives it, and every row names a setting (or is marked
// removed, for a key the component refuses).
func TestSettingsTablesMatchDefaults(t *testing.T) {
	for _, c := range components {
		rows := settingsTable(t, c.readme)
		keys := map[string]bool{}
		for _, s := range settings("", reflect.ValueOf(c.config)) {
			keys[s.key] = true
			doc, ok := rows[s.key]
			switch {
			case !ok:
				t.Errorf("%s: setting %s has no row in the settings table", c.readme, s.key)
			case doc == removed:
				// A former key, kept in the struct to be refused.
			default:
				if err := sameDefault(doc, s.val); err != nil {
					t.Errorf("%s: %s: the table says %s, but %v", c.readme, s.key, doc, err)
				}
			}
		}
		for key, doc := range rows {
			if !keys[key] && doc != removed {
				t.Errorf("%s: the table's %s is not a setting of the component", c.readme, key)
			}
		}
	}
}

// TestReceiverSettingsNamedEverywhere: the pages that list the process_ctx
// receiver's settings name each of them.
func TestReceiverSettingsNamedEverywhere(t *testing.T) {
	var keys []string
	for _, s := range settings("", reflect.ValueOf(processctxreceiver.NewFactory().CreateDefaultConfig())) {
		keys = append(keys, s.key)
	}
	if len(keys) < 4 {
		t.Fatalf("receiver settings %v: want at least extension, entity_interval, event_format, k8s_node_name", keys)
	}
	for _, page := range []string{"README.md", "docs/entity-events.md"} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), page))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.Contains(string(b), "`"+k+"`") {
				t.Errorf("%s does not name the receiver's setting `%s`", page, k)
			}
		}
	}
}

// TestSettingsCheckCatches: the comparison above fails on a wrong default
// of each kind.
func TestSettingsCheckCatches(t *testing.T) {
	for _, tc := range []struct {
		doc string
		v   any
	}{
		{"10s", 30 * time.Second}, {"640", 1024}, {"1,024", 640}, {"false", true}, {"auto", "off"}, {`""`, "x"},
		{"[a]", []string{"b"}}, {"[]", []string{"a"}}, {"process_ctx", component.MustNewID("otlp")},
	} {
		if sameDefault(tc.doc, reflect.ValueOf(tc.v)) == nil {
			t.Errorf("%s accepted as the default %v", tc.doc, tc.v)
		}
	}
	for _, tc := range []struct {
		doc string
		v   any
	}{
		{"1m", time.Minute}, {"500us", 500 * time.Microsecond}, {"65,536", uint32(65536)}, {`""`, ""},
		{`["service.", "deployment."]`, []string{"service.", "deployment."}}, {"[]", []int(nil)},
		{"process_ctx", component.MustNewID("process_ctx")},
	} {
		if err := sameDefault(tc.doc, reflect.ValueOf(tc.v)); err != nil {
			t.Errorf("%s refused as the default %v: %v", tc.doc, tc.v, err)
		}
	}
}

// TestEveryComponentChecked: each component with a README is in
// components, so its settings table is checked too.
func TestEveryComponentChecked(t *testing.T) {
	root := testenv.RepoRoot()
	for _, glob := range []string{"extension/*/README.md", "receiver/*/README.md", "processor/*/README.md", "connector/*/README.md", "exporter/*/README.md"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			if !slices.ContainsFunc(components, func(c componentDoc) bool { return c.readme == rel }) {
				t.Errorf("%s: add the component's default configuration to components (test/docs)", rel)
			}
		}
	}
}

// TestMetadataNamesDistribution: each component's metadata.yaml lists the
// otelctx distribution (status.distributions) exactly when
// builder-config.yaml builds the component into it.
func TestMetadataNamesDistribution(t *testing.T) {
	root := testenv.RepoRoot()
	builder := read(t, "builder-config.yaml")
	m, _ := filepath.Glob(filepath.Join(root, "*", "*", "metadata.yaml"))
	if len(m) < 4 {
		t.Fatalf("%d metadata.yaml files, want the four components'", len(m))
	}
	for _, p := range m {
		rel, _ := filepath.Rel(root, p)
		var md struct {
			Status struct {
				Distributions []string `json:"distributions"`
			} `json:"status"`
		}
		if err := yaml.Unmarshal([]byte(read(t, rel)), &md); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		built := strings.Contains(builder, "import: github.com/otelctx/otelctx/"+filepath.Dir(rel)+"\n")
		if listed := slices.Contains(md.Status.Distributions, "otelctx"); listed != built {
			t.Errorf("%s: status.distributions %v, and builder-config.yaml builds it into otelctx: %v", rel, md.Status.Distributions, built)
		}
	}
}

// TestReceiverMetricsNamedAsTheReceivers: the pages that tell the
// extension's otelcol_processctx_* metrics from the receiver's name every
// metric of the receiver's metadata.yaml (they once named one of two).
func TestReceiverMetricsNamedAsTheReceivers(t *testing.T) {
	var md struct {
		Telemetry struct {
			Metrics map[string]any `json:"metrics"`
		} `json:"telemetry"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "receiver/processctxreceiver/metadata.yaml")), &md); err != nil {
		t.Fatal(err)
	}
	if len(md.Telemetry.Metrics) == 0 {
		t.Fatal("the receiver's metadata.yaml lists no metrics")
	}
	for _, page := range []string{"README.md", "docs/troubleshooting.md", "extension/processctxextension/README.md", "receiver/processctxreceiver/README.md"} {
		text := read(t, page)
		for name := range md.Telemetry.Metrics {
			if !strings.Contains(text, "`otelcol_"+name+"`") {
				t.Errorf("%s does not name the receiver's otelcol_%s", page, name)
			}
		}
	}
}

// TestOneSpellingPerLabelValue: across the components' metadata.yaml, a
// label value is spelt one way: no two enum values that differ only in
// spaces, hyphens, underscores or case (`user_share` of reads_failed was
// `user share` in thread_read_failures).
func TestOneSpellingPerLabelValue(t *testing.T) {
	root := testenv.RepoRoot()
	m, _ := filepath.Glob(filepath.Join(root, "*", "*", "metadata.yaml"))
	seen := map[string]string{} // normalised -> as written, and where
	norm := strings.NewReplacer(" ", "_", "-", "_")
	n := 0
	for _, p := range m {
		rel, _ := filepath.Rel(root, p)
		var md struct {
			Attributes map[string]struct {
				Enum []any `json:"enum"`
			} `json:"attributes"`
		}
		if err := yaml.Unmarshal([]byte(read(t, rel)), &md); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for attr, a := range md.Attributes {
			for _, v := range a.Enum {
				s := fmt.Sprint(v)
				n++
				k := norm.Replace(strings.ToLower(s))
				if prev, ok := seen[k]; ok && !strings.HasPrefix(prev, s+" (") {
					t.Errorf("%s %s: value %q, elsewhere %s", rel, attr, s, prev)
				}
				seen[k] = s + " (" + rel + " " + attr + ")"
			}
		}
	}
	if n < 50 {
		t.Fatalf("%d enum values read, want the components' label values", n)
	}
}
