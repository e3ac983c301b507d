// SPDX-License-Identifier: Apache-2.0

package linuxonly

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
)

func TestStartFails(t *testing.T) {
	c := Component{Name: "processctx extension"}
	err := c.Start(context.Background(), componenttest.NewNopHost())
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Start: %v, want ErrUnsupported", err)
	}
	want := "processctx extension: only supported on Linux, not " + runtime.GOOS
	if err.Error() != want {
		t.Errorf("Start: %q, want %q", err, want)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestConfigAcceptsAnyKeys(t *testing.T) {
	conf := confmap.NewFromStringMap(map[string]any{
		"collection_interval": "1s",
		"include":             map[string]any{"executables": []any{"java"}},
	})
	var cfg Config
	if err := conf.Unmarshal(&cfg); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	// A plain struct without Unmarshal refuses the same keys: the test
	// sees the difference Unmarshal makes.
	var plain struct{}
	if err := conf.Unmarshal(&plain); err == nil || !strings.Contains(err.Error(), "invalid keys") {
		t.Fatalf("Unmarshal into struct{}: %v, want invalid keys", err)
	}
}
