// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// invalidUTF8 counts the strings read from publishers whose invalid UTF-8
// was replaced by U+FFFD (utf8safe) before reaching pdata, by source.
type invalidUTF8 struct {
	c metric.Int64Counter
	// attrs: one attribute set per source.
	attrs map[string]metric.MeasurementOption
}

// Sources of invalid_utf8.
const (
	utf8ProcessContext = "process_context"
	utf8ThreadRecord   = "thread_record"
)

func newInvalidUTF8(in *Instruments) invalidUTF8 {
	u := invalidUTF8{c: in.ProcessctxInvalidUtf8, attrs: map[string]metric.MeasurementOption{}}
	for _, s := range []string{utf8ProcessContext, utf8ThreadRecord} {
		u.attrs[s] = metric.WithAttributeSet(attribute.NewSet(attribute.String("source", s)))
	}
	return u
}

func (u invalidUTF8) add(ctx context.Context, source string, n int) {
	if n > 0 {
		u.c.Add(ctx, int64(n), u.attrs[source])
	}
}
