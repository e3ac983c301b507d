// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/catalogview"
)

// TestCatalogEndpointLifecycle: with catalog_endpoint set, the extension
// serves its catalog from Start to Shutdown (the socket is gone after);
// unset (the default), it serves nothing; a non-loopback address is
// refused by Validate.
func TestCatalogEndpointLifecycle(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "catalog.sock")
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	if cfg.CatalogEndpoint != "" {
		t.Fatalf("catalog_endpoint defaults to %q, want off", cfg.CatalogEndpoint)
	}
	cfg.Include.PIDs = []int{os.Getpid()}
	cfg.CatalogEndpoint = "unix:" + sock
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	set := extensiontest.NewNopSettings(metadata.Type)
	set.ID = component.MustNewIDWithName("process_ctx", "catalog")
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	v, err := catalogview.Fetch("unix:"+sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.Processes == nil {
		t.Errorf("view %+v: no processes list", v)
	}
	if err := ext.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Shutdown: %v", err)
	}

	cfg.CatalogEndpoint = "0.0.0.0:13135"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("catalog_endpoint 0.0.0.0:13135: %v, want refused (loopback only)", err)
	}
}
