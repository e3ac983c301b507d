// SPDX-License-Identifier: Apache-2.0

// Package telemetrytest checks a component's metadata.yaml against the
// telemetry its code registers: a MeterProvider that records every
// instrument created (name, description, unit, kind) and a parse of the
// metadata's attributes and telemetry.metrics sections.
package telemetrytest

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
	"sigs.k8s.io/yaml"
)

// Instrument is one instrument creation.
type Instrument struct {
	Scope       string
	Name        string
	Description string
	Unit        string
	// Type is the metadata.yaml form: "sum", "gauge" or "histogram".
	Type string
	// ValueType is "int" or "double".
	ValueType string
	// Monotonic: a counter (a sum that only goes up).
	Monotonic bool
	// Buckets are a histogram's explicit bucket boundaries (nil: default).
	Buckets []float64
}

// Recorder is a metric.MeterProvider whose meters record every instrument
// created and hand out no-op instruments.
type Recorder struct {
	embedded.MeterProvider
	mu   sync.Mutex
	list []Instrument
}

// Meter returns a recording meter for scope name.
func (r *Recorder) Meter(name string, _ ...metric.MeterOption) metric.Meter {
	return &meter{r: r, scope: name}
}

// Instruments returns every creation so far, in order (an instrument
// created twice, e.g. by two code paths, is listed twice).
func (r *Recorder) Instruments() []Instrument {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

func (r *Recorder) add(i Instrument) {
	r.mu.Lock()
	r.list = append(r.list, i)
	r.mu.Unlock()
}

type meter struct {
	noop.Meter
	r     *Recorder
	scope string
}

func (m *meter) rec(name, desc, unit, typ, vt string, mono bool, buckets []float64) {
	m.r.add(Instrument{Scope: m.scope, Name: name, Description: desc, Unit: unit, Type: typ, ValueType: vt, Monotonic: mono, Buckets: buckets})
}

func (m *meter) Int64Counter(n string, o ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "int", true, nil)
	return m.Meter.Int64Counter(n, o...)
}

func (m *meter) Int64UpDownCounter(n string, o ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c := metric.NewInt64UpDownCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "int", false, nil)
	return m.Meter.Int64UpDownCounter(n, o...)
}

func (m *meter) Int64Histogram(n string, o ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "histogram", "int", false, c.ExplicitBucketBoundaries())
	return m.Meter.Int64Histogram(n, o...)
}

func (m *meter) Int64Gauge(n string, o ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	c := metric.NewInt64GaugeConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "gauge", "int", false, nil)
	return m.Meter.Int64Gauge(n, o...)
}

func (m *meter) Int64ObservableCounter(n string, o ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	c := metric.NewInt64ObservableCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "int", true, nil)
	return m.Meter.Int64ObservableCounter(n, o...)
}

func (m *meter) Int64ObservableUpDownCounter(n string, o ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	c := metric.NewInt64ObservableUpDownCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "int", false, nil)
	return m.Meter.Int64ObservableUpDownCounter(n, o...)
}

func (m *meter) Int64ObservableGauge(n string, o ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	c := metric.NewInt64ObservableGaugeConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "gauge", "int", false, nil)
	return m.Meter.Int64ObservableGauge(n, o...)
}

func (m *meter) Float64Counter(n string, o ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	c := metric.NewFloat64CounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "double", true, nil)
	return m.Meter.Float64Counter(n, o...)
}

func (m *meter) Float64UpDownCounter(n string, o ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	c := metric.NewFloat64UpDownCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "double", false, nil)
	return m.Meter.Float64UpDownCounter(n, o...)
}

func (m *meter) Float64Histogram(n string, o ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "histogram", "double", false, c.ExplicitBucketBoundaries())
	return m.Meter.Float64Histogram(n, o...)
}

func (m *meter) Float64Gauge(n string, o ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	c := metric.NewFloat64GaugeConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "gauge", "double", false, nil)
	return m.Meter.Float64Gauge(n, o...)
}

func (m *meter) Float64ObservableCounter(n string, o ...metric.Float64ObservableCounterOption) (metric.Float64ObservableCounter, error) {
	c := metric.NewFloat64ObservableCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "double", true, nil)
	return m.Meter.Float64ObservableCounter(n, o...)
}

func (m *meter) Float64ObservableUpDownCounter(n string, o ...metric.Float64ObservableUpDownCounterOption) (metric.Float64ObservableUpDownCounter, error) {
	c := metric.NewFloat64ObservableUpDownCounterConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "sum", "double", false, nil)
	return m.Meter.Float64ObservableUpDownCounter(n, o...)
}

func (m *meter) Float64ObservableGauge(n string, o ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	c := metric.NewFloat64ObservableGaugeConfig(o...)
	m.rec(n, c.Description(), c.Unit(), "gauge", "double", false, nil)
	return m.Meter.Float64ObservableGauge(n, o...)
}

// Metadata is the part of a metadata.yaml these checks read.
type Metadata struct {
	Attributes map[string]Attribute `json:"attributes"`
	Telemetry  struct {
		Metrics map[string]Metric `json:"metrics"`
	} `json:"telemetry"`
}

// Attribute is one entry of metadata.yaml's attributes.
type Attribute struct {
	NameOverride string   `json:"name_override"`
	Description  string   `json:"description"`
	Type         string   `json:"type"`
	Enum         []string `json:"enum"`
}

// Metric is one entry of metadata.yaml's telemetry.metrics.
type Metric struct {
	// Key is the entry's key: the name without its prefix (mdatagen's
	// form; the map of Metadata is by full name).
	Key         string `json:"-"`
	Prefix      string `json:"prefix"`
	Enabled     bool   `json:"enabled"`
	Description string `json:"description"`
	Unit        string `json:"unit"`
	Sum         *struct {
		ValueType string `json:"value_type"`
		Monotonic bool   `json:"monotonic"`
	} `json:"sum"`
	Gauge *struct {
		ValueType string `json:"value_type"`
	} `json:"gauge"`
	Histogram *struct {
		ValueType        string    `json:"value_type"`
		BucketBoundaries []float64 `json:"bucket_boundaries"`
	} `json:"histogram"`
	Attributes []string `json:"attributes"`
}

// ReadMetadata parses path (a metadata.yaml). Its telemetry.metrics are
// keyed by full name: the key with its prefix (otelcol_ unless the entry
// sets one), as mdatagen's telemetry builder registers it.
func ReadMetadata(t testing.TB, path string) *Metadata {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var md Metadata
	if err := yaml.Unmarshal(b, &md); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	byName := make(map[string]Metric, len(md.Telemetry.Metrics))
	for key, m := range md.Telemetry.Metrics {
		m.Key = key
		byName[cmp(m.Prefix, "otelcol_")+key] = m
	}
	md.Telemetry.Metrics = byName
	return &md
}

// CheckInstruments compares the recorded instruments with md's
// telemetry.metrics: every instrument created under scope (the others are
// the collector helpers') is listed with
// the same description, unit and kind, and every listed metric was created,
// except those in notReached (created only on paths the test cannot take;
// the caller says why).
func CheckInstruments(t testing.TB, md *Metadata, scope string, got []Instrument, notReached ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, in := range got {
		if in.Scope != scope {
			// The collector's helpers' own (receiverhelper,
			// processorhelper): not the component's to list.
			if _, ok := md.Telemetry.Metrics[in.Name]; ok {
				t.Errorf("%s created under scope %q, want %q", in.Name, in.Scope, scope)
			}
			continue
		}
		seen[in.Name] = true
		m, ok := md.Telemetry.Metrics[in.Name]
		if !ok {
			t.Errorf("%s is registered but not in metadata.yaml", in.Name)
			continue
		}
		if in.Description != m.Description {
			t.Errorf("%s: description\n code:     %q\n metadata: %q", in.Name, in.Description, m.Description)
		}
		if in.Unit != m.Unit {
			t.Errorf("%s: unit %q in the code, %q in metadata.yaml", in.Name, in.Unit, m.Unit)
		}
		if !m.Enabled {
			t.Errorf("%s: not enabled in metadata.yaml, but always registered", in.Name)
		}
		if kind := m.kind(); kind != in.kind() {
			t.Errorf("%s: %s in the code, %s in metadata.yaml", in.Name, in.kind(), kind)
		}
		if m.Histogram != nil && !slices.Equal(in.Buckets, m.Histogram.BucketBoundaries) {
			t.Errorf("%s: bucket boundaries %v in the code, %v in metadata.yaml", in.Name, in.Buckets, m.Histogram.BucketBoundaries)
		}
		for _, a := range m.Attributes {
			if _, ok := md.Attributes[a]; !ok {
				t.Errorf("%s: attribute %q is not in metadata.yaml's attributes", in.Name, a)
			}
		}
	}
	var missing []string
	for name := range md.Telemetry.Metrics {
		if !seen[name] && !slices.Contains(notReached, name) {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("%s is in metadata.yaml but was not registered", name)
	}
	for _, name := range notReached {
		if seen[name] {
			t.Errorf("%s was registered: take it off the test's not-reached list", name)
		}
	}
}

// CheckRegisteredOnce fails for an instrument of scope created more than
// once in got (one component's telemetry builder creates each once).
func CheckRegisteredOnce(t testing.TB, scope string, got []Instrument) {
	t.Helper()
	n := map[string]int{}
	for _, in := range got {
		if in.Scope == scope {
			n[in.Name]++
		}
	}
	for name, c := range n {
		if c > 1 {
			t.Errorf("%s registered %d times", name, c)
		}
	}
}

func (m Metric) kind() string {
	switch {
	case m.Sum != nil:
		return fmt.Sprintf("sum/%s/monotonic=%v", m.Sum.ValueType, m.Sum.Monotonic)
	case m.Gauge != nil:
		return "gauge/" + m.Gauge.ValueType
	case m.Histogram != nil:
		return "histogram/" + m.Histogram.ValueType
	}
	return "no type"
}

func (in Instrument) kind() string {
	if in.Type == "sum" {
		return fmt.Sprintf("sum/%s/monotonic=%v", in.ValueType, in.Monotonic)
	}
	return in.Type + "/" + in.ValueType
}

// CheckEnum compares metadata.yaml's enum of attribute id with the values
// the code uses (order aside). It also checks that metric names the
// attribute (md.Telemetry.Metrics[metric].Attributes contains id) and that
// its name (name_override, or id) is name.
func CheckEnum(t testing.TB, md *Metadata, metric, id, name string, code []string) {
	t.Helper()
	a, ok := md.Attributes[id]
	if !ok {
		t.Errorf("attribute %q is not in metadata.yaml", id)
		return
	}
	if !slices.Contains(md.Telemetry.Metrics[metric].Attributes, id) {
		t.Errorf("%s: attribute %q not listed in metadata.yaml", metric, id)
	}
	if got := cmp(a.NameOverride, id); got != name {
		t.Errorf("attribute %q is named %q in metadata.yaml, %q in the code", id, got, name)
	}
	want, have := slices.Clone(code), slices.Clone(a.Enum)
	slices.Sort(want)
	slices.Sort(have)
	want, have = slices.Compact(want), slices.Compact(have)
	for _, v := range want {
		if !slices.Contains(have, v) {
			t.Errorf("%s{%s=%q}: used by the code, not in metadata.yaml's enum %q", metric, name, v, id)
		}
	}
	for _, v := range have {
		if !slices.Contains(want, v) {
			t.Errorf("%s{%s=%q}: in metadata.yaml's enum %q, not used by the code", metric, name, v, id)
		}
	}
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
