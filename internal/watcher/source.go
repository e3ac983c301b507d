package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Values of otelcol_processctx_thread_context_source's source attribute:
// where thread contexts are read now.
const (
	sourceFentry   = sampler.MethodFentry  // at a followed profiler's samples, through fentry
	sourceHrtimer  = sampler.MethodHrtimer // the same, through its sampling timer
	sourceOwnTicks = "own_ticks"           // at the eBPF sampler's own ticks
	sourcePtrace   = "ptrace"              // by stopping threads (thread_sampler: ptrace)
	sourceOff      = "off"                 // nowhere: off, refused, or waiting for a profiler (follow)
)

var threadSources = []string{sourceFentry, sourceHrtimer, sourceOwnTicks, sourcePtrace, sourceOff}

// sourceGauge records 1 for the current thread-context source and 0 for
// the others, every round: a dashboard sees each switch, e.g. the gap
// between a profiler's start and its first followed sample.
type sourceGauge struct {
	g     metric.Int64Gauge
	attrs []metric.RecordOption // by index in threadSources
}

func newSourceGauge(in *Instruments) *sourceGauge {
	s := &sourceGauge{g: in.ProcessctxThreadContextSource}
	for _, src := range threadSources {
		s.attrs = append(s.attrs, metric.WithAttributeSet(attribute.NewSet(attribute.String("source", src))))
	}
	return s
}

func (s *sourceGauge) record(ctx context.Context, current string) {
	for i, src := range threadSources {
		v := int64(0)
		if src == current {
			v = 1
		}
		s.g.Record(ctx, v, s.attrs[i])
	}
}

// threadSource is where the watcher reads thread contexts now.
func (w *Watcher) threadSource() string {
	switch {
	case w.sampler != nil:
		method, ownTicks := w.sampler.s.Following()
		switch {
		case method != "":
			return method
		case ownTicks:
			return sourceOwnTicks
		}
	case w.threads != nil:
		return sourcePtrace
	}
	return sourceOff
}
