// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor"
)

// enrich sends pd through a ctx_enrich processor reading the catalog of the
// process_ctx extension ext (started by ebpfwatch), and returns what
// reached the next consumer.
func enrich(t *testing.T, ext component.ID, pd pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	return enrichWith(t, ebpfwatch.Host, ext, pd)
}

// enrichWith is enrich with the extension ext of host.
func enrichWith(t *testing.T, host component.Host, ext component.ID, pd pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	f := ctxenrichprocessor.NewFactory()
	cfg := f.CreateDefaultConfig().(*ctxenrichprocessor.Config)
	cfg.Extension = ext
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.ProfilesSink)
	proc, err := f.CreateProfiles(context.Background(), processortest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := proc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := proc.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	all := sink.AllProfiles()
	if len(all) != 1 {
		t.Fatalf("%d profiles messages reached the sink, want 1", len(all))
	}
	return all[0]
}
