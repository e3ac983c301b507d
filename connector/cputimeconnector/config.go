// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"errors"
	"fmt"
	"time"

	"github.com/otelctx/otelctx/internal/cputime"
)

// Temporality values of aggregation_temporality (spanmetrics' spelling).
const (
	Cumulative = "AGGREGATION_TEMPORALITY_CUMULATIVE"
	Delta      = "AGGREGATION_TEMPORALITY_DELTA"
)

// MaxDimensions bounds dimensions: a series key holds one attribute per
// dimension in a fixed-size array (no allocation per sample).
const MaxDimensions = cputime.MaxKeys

// Config of the cpu_time connector. The names are spanmetrics' where the
// meaning is the same.
type Config struct {
	// Dimensions are the data point attributes of the CPU time metric (and
	// the span records' attributes): each is taken from the sample's
	// attributes, else from its resource; absent, it is left out.
	Dimensions []Dimension `mapstructure:"dimensions"`
	// ResourceAttributes are copied from the samples' resource onto the
	// metric's and the records' resource; service.name is always one.
	ResourceAttributes []string `mapstructure:"resource_attributes"`
	// AggregationTemporality of the CPU time sum.
	AggregationTemporality string `mapstructure:"aggregation_temporality"`
	// AggregationCardinalityLimit bounds the series held; samples of a
	// further series go to one overflow point (otel.metric.overflow=true).
	AggregationCardinalityLimit int `mapstructure:"aggregation_cardinality_limit"`
	// MetricsFlushInterval: how often the metric is sent.
	MetricsFlushInterval time.Duration `mapstructure:"metrics_flush_interval"`
	// MetricsExpiration: a cumulative series not updated for this long is
	// forgotten (its slot freed); 0 keeps series forever.
	MetricsExpiration time.Duration `mapstructure:"metrics_expiration"`
	Exemplars         Exemplars     `mapstructure:"exemplars"`
	SpanRecords       SpanRecords   `mapstructure:"span_records"`

	_ struct{}
}

// Dimension is a data point attribute (spanmetrics' dimensions, without a
// default value: an absent dimension is left out rather than invented).
type Dimension struct {
	Name string `mapstructure:"name"`

	_ struct{}
}

// String is the dimension's name (how documentation lists the defaults).
func (d Dimension) String() string { return d.Name }

// Exemplars of the CPU time metric: the spans whose samples a point counts.
type Exemplars struct {
	Enabled         bool `mapstructure:"enabled"`
	MaxPerDataPoint int  `mapstructure:"max_per_data_point"`

	_ struct{}
}

// SpanRecords: the log records, one per span seen in an interval.
type SpanRecords struct {
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	// MaxPerInterval bounds the spans held per interval; a further span's
	// CPU time is still in the metric, and it is counted as folded.
	MaxPerInterval int `mapstructure:"max_per_interval"`
	// TopFunctions: the span's N leaf functions with the most samples, 0
	// for none.
	TopFunctions int `mapstructure:"top_functions"`

	_ struct{}
}

// Bounds of the settings: beyond them, a setting is a mistake, not a need.
const (
	maxCardinality   = 1_000_000
	maxExemplars     = 100
	maxSpanRecords   = 1_000_000
	maxTopFunctions  = 20
	minFlushInterval = 100 * time.Millisecond
	maxFlushInterval = time.Hour
	maxLeavesPerSpan = 32 // distinct leaf functions counted per span; the rest are "other"
)

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Dimensions) > MaxDimensions {
		errs = append(errs, fmt.Errorf("dimensions: %d, at most %d", len(c.Dimensions), MaxDimensions))
	}
	seen := map[string]bool{}
	for _, d := range c.Dimensions {
		switch {
		case d.Name == "":
			errs = append(errs, errors.New("dimensions: a dimension without a name"))
		case seen[d.Name]:
			errs = append(errs, fmt.Errorf("dimensions: %q twice", d.Name))
		case d.Name == overflowKey:
			errs = append(errs, fmt.Errorf("dimensions: %q is the overflow point's", d.Name))
		}
		seen[d.Name] = true
	}
	for _, k := range c.ResourceAttributes {
		if k == "" {
			errs = append(errs, errors.New("resource_attributes: an empty key"))
		}
	}
	if c.AggregationTemporality != Cumulative && c.AggregationTemporality != Delta {
		errs = append(errs, fmt.Errorf("aggregation_temporality: %q, want %s or %s", c.AggregationTemporality, Cumulative, Delta))
	}
	if c.AggregationCardinalityLimit < 1 || c.AggregationCardinalityLimit > maxCardinality {
		errs = append(errs, fmt.Errorf("aggregation_cardinality_limit: %d, want 1 to %d (the connector is always bounded)", c.AggregationCardinalityLimit, maxCardinality))
	}
	if c.MetricsFlushInterval < minFlushInterval || c.MetricsFlushInterval > maxFlushInterval {
		errs = append(errs, fmt.Errorf("metrics_flush_interval: %v, want %v to %v", c.MetricsFlushInterval, minFlushInterval, maxFlushInterval))
	}
	if c.MetricsExpiration < 0 {
		errs = append(errs, fmt.Errorf("metrics_expiration: %v is negative", c.MetricsExpiration))
	}
	if c.Exemplars.MaxPerDataPoint < 0 || c.Exemplars.MaxPerDataPoint > maxExemplars ||
		(c.Exemplars.Enabled && c.Exemplars.MaxPerDataPoint == 0) {
		errs = append(errs, fmt.Errorf("exemplars.max_per_data_point: %d, want 1 to %d when exemplars are enabled", c.Exemplars.MaxPerDataPoint, maxExemplars))
	}
	if c.SpanRecords.FlushInterval < minFlushInterval || c.SpanRecords.FlushInterval > maxFlushInterval {
		errs = append(errs, fmt.Errorf("span_records.flush_interval: %v, want %v to %v", c.SpanRecords.FlushInterval, minFlushInterval, maxFlushInterval))
	}
	if c.SpanRecords.MaxPerInterval < 1 || c.SpanRecords.MaxPerInterval > maxSpanRecords {
		errs = append(errs, fmt.Errorf("span_records.max_per_interval: %d, want 1 to %d", c.SpanRecords.MaxPerInterval, maxSpanRecords))
	}
	if c.SpanRecords.TopFunctions < 0 || c.SpanRecords.TopFunctions > maxTopFunctions {
		errs = append(errs, fmt.Errorf("span_records.top_functions: %d, want 0 to %d", c.SpanRecords.TopFunctions, maxTopFunctions))
	}
	return errors.Join(errs...)
}
