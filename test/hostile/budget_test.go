package hostile

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/telemetrytest"
	"github.com/otelctx/otelctx/internal/testpub"
)

// TestContextBudget: publishers whose contexts would cost many times their
// payload once decoded (63 KiB of empty nested values; 128 entity
// references naming nested attributes) are refused and counted as
// over_budget, never tracked; an ordinary publisher beside them is tracked
// and its updates read.
func TestContextBudget(t *testing.T) {
	var pids []int
	var hostile []*testpub.Publisher
	for i, load := range [][]string{
		{"nested 2 128 120"},
		{"nested 2 128 120"},
		{"nested 2 16 16", "entityrefs 128"},
	} {
		p := testpub.Start(t, testpub.Glibc)
		p.Set("service.name", "hostile", "service.instance.id", string(rune('a'+i)))
		for _, cmd := range load {
			p.Do("%s", cmd)
		}
		p.Publish()
		hostile = append(hostile, p)
		pids = append(pids, p.PID)
	}
	ordinary := testpub.Start(t, testpub.Glibc)
	ordinary.Set("service.name", "ordinary")
	ordinary.Publish()
	pids = append(pids, ordinary.PID)

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ext, wat := startExtension(t, config(processctxextension.ThreadSamplerOff, pids...), tel)
	defer func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	cat := wat.Catalog()
	eventually(t, "every hostile context refused as over_budget", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "over_budget") >= int64(len(hostile))
	})
	eventually(t, "the ordinary publisher tracked", func() bool {
		_, ok := cat.Process(ordinary.PID)
		return ok
	})
	for _, p := range hostile {
		if _, ok := cat.Process(p.PID); ok {
			t.Errorf("hostile publisher %d tracked", p.PID)
		}
	}
	ordinary.Set("service.version", "2")
	ordinary.Publish()
	eventually(t, "the ordinary publisher's update read", func() bool {
		p, ok := cat.Process(ordinary.PID)
		return ok && len(p.Context.Resource.Attributes) == 2
	})
}
