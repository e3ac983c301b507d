// SPDX-License-Identifier: Apache-2.0

package processctxtel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Counter is a counter of one attribute (e.g. reason): each value's option
// set is built once, as building one per recording would cost more than
// the recording.
type Counter struct {
	c    metric.Int64Counter
	sets *attributeSets
}

// NewCounter counts c by key; values are the ones known in advance (any
// other is added on first use).
func NewCounter(c metric.Int64Counter, key string, values ...string) *Counter {
	return &Counter{c: c, sets: newAttributeSets(key, values)}
}

// Add adds n (zero included: a first round exports every series) to value.
func (c *Counter) Add(ctx context.Context, value string, n int64) {
	c.c.Add(ctx, n, c.sets.option(value))
}

// Gauge is a gauge of one attribute (e.g. stage), as Counter.
type Gauge struct {
	g    metric.Int64Gauge
	sets *attributeSets
}

// NewGauge records g by key; values as NewCounter's.
func NewGauge(g metric.Int64Gauge, key string, values ...string) *Gauge {
	return &Gauge{g: g, sets: newAttributeSets(key, values)}
}

// Record records v for value.
func (g *Gauge) Record(ctx context.Context, value string, v int64) {
	g.g.Record(ctx, v, g.sets.option(value))
}

// attributeSets are the option sets of one attribute's values. The values
// known in advance are read without a lock (the readers' goroutines record
// on every sample); the others, added on first use, under one.
type attributeSets struct {
	key   string
	known map[string]metric.MeasurementOption // not changed after creation
	mu    sync.Mutex
	added map[string]metric.MeasurementOption
}

func newAttributeSets(key string, values []string) *attributeSets {
	s := &attributeSets{key: key, known: make(map[string]metric.MeasurementOption, len(values)), added: map[string]metric.MeasurementOption{}}
	for _, v := range values {
		s.known[v] = s.build(v)
	}
	return s
}

func (s *attributeSets) build(v string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(s.key, v)))
}

func (s *attributeSets) option(v string) metric.MeasurementOption {
	if o, ok := s.known[v]; ok {
		return o
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.added[v]
	if !ok {
		o = s.build(v)
		if len(s.added) < maxAddedValues {
			s.added[v] = o
		}
	}
	return o
}

// maxAddedValues bounds the values remembered beyond the known ones: the
// series themselves are bounded by the SDK's cardinality limit, this
// cache by its own.
const maxAddedValues = 64
