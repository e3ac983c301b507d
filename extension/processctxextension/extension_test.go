// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// eventually waits for cond (testenv.Eventually).
var eventually = testenv.Eventually

// startExtension creates and starts the extension id with cfg, shut down
// when the test ends.
func startExtension(t *testing.T, id component.ID, cfg *Config) extension.Extension {
	t.Helper()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.ID = id
	ext, err := NewFactory().Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return ext
}

func TestFactory(t *testing.T) {
	t.Parallel()
	f := NewFactory()
	if f.Type() != metadata.Type || f.Type().String() != "process_ctx" || f.Stability() != component.StabilityLevelDevelopment {
		t.Errorf("factory %v %v", f.Type(), f.Stability())
	}
}

// The lifecycle the collector's generated tests check, from the default
// configuration: create, start, shutdown, shutdown again; shutdown of one
// never started; a second one starting after the first shut down.
func TestLifecycle(t *testing.T) {
	testenv.RequireRoot(t) // the default configuration reads every process's maps
	f := NewFactory()
	set := extensiontest.NewNopSettings(metadata.Type)
	create := func() extension.Extension {
		t.Helper()
		ext, err := f.Create(context.Background(), set, f.CreateDefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		return ext
	}
	fresh := create()
	if err := fresh.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown without start: %v", err)
	}
	for range 2 { // the same ID twice: nothing is registered globally
		ext := create()
		if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		if ext.(watcher.Provider).Watcher().Catalog() == nil {
			t.Fatal("no catalog")
		}
		for range 2 {
			if err := ext.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FromHost finds the extension by ID, and says what to do when the ID
// names nothing or something else.
func TestFromHost(t *testing.T) {
	t.Parallel()
	id := component.MustNewIDWithName("process_ctx", "host")
	ext, err := NewFactory().Create(context.Background(), extensiontest.NewNopSettings(metadata.Type), watchertest.FastConfig(1<<22))
	if err != nil {
		t.Fatal(err)
	}
	other := component.MustNewID("zpages")
	nf := extensiontest.NewNopFactory()
	nop, err := nf.Create(context.Background(), extensiontest.NewNopSettings(nf.Type()), nf.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().AddComponent(id, ext).AddComponent(other, nop)
	w, err := watcher.FromHost(host, id)
	if err != nil || w != ext.(watcher.Provider).Watcher() {
		t.Fatalf("FromHost: %v %v", w, err)
	}
	for _, tc := range []struct {
		id   component.ID
		want string
	}{
		{component.MustNewID("process_ctx"), "no extension \"process_ctx\" in this collector: add `process_ctx: {}` under extensions: and list it in service.extensions"},
		{other, "extension \"zpages\" is not a process_ctx extension"},
	} {
		if _, err := watcher.FromHost(host, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromHost(%v): %v, want %q", tc.id, err, tc.want)
		}
	}
	if _, err := watcher.FromHost(nil, id); err == nil {
		t.Error("FromHost(nil host) found an extension")
	}

	// Either spelling of the type finds the extension defined with the
	// other (processctx is the deprecated alias), its name kept.
	if w, err := watcher.FromHost(host, component.MustNewIDWithName("processctx", "host")); err != nil || w != ext.(watcher.Provider).Watcher() {
		t.Errorf("FromHost(processctx/host) with process_ctx/host defined: %v %v", w, err)
	}
	old := watchertest.NewHost().AddComponent(component.MustNewID("processctx"), ext)
	if w, err := watcher.FromHost(old, component.MustNewID("process_ctx")); err != nil || w != ext.(watcher.Provider).Watcher() {
		t.Errorf("FromHost(process_ctx) with processctx defined: %v %v", w, err)
	}
	if _, err := watcher.FromHost(old, component.MustNewIDWithName("process_ctx", "host")); err == nil {
		t.Error("FromHost(process_ctx/host) found processctx (another name)")
	}
}
