// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"errors"
	"fmt"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// A refusal over the resolver's bounds has its own reason, also when it
// wraps ErrNotFound (the variable not found once a file was refused).
func TestResolveReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{tlsvar.ErrNotFound, reasonNoSymbol},
		{fmt.Errorf("%w: hidden", tlsvar.ErrUnsupported), reasonUnsupported},
		{fmt.Errorf("%w: more than 4096 files mapped at offset 0", tlsvar.ErrLimit), reasonResolveLimit},
		{fmt.Errorf("%w: %w, and some mapped files were refused", tlsvar.ErrLimit, tlsvar.ErrNotFound), reasonResolveLimit},
		{fmt.Errorf("%w: %w: total", tlsvar.ErrTransient, tlsvar.ErrLimit), reasonResolveLimit},
		{errors.New("open: permission denied"), reasonResolve},
	} {
		if got := resolveReason(tc.err); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A failed registry.Locate counts its resolution's reason, or unsupported
// when the variable or the walk is not the schema's.
func TestLocateReason(t *testing.T) {
	tl := processctx.ThreadLocal{SchemaVersion: "tlsdesc_v1_dev"}
	for _, tc := range []struct {
		resolve func() (*tlsvar.Location, error)
		want    string
	}{
		{func() (*tlsvar.Location, error) { return nil, tlsvar.ErrNotFound }, reasonNoSymbol},
		{func() (*tlsvar.Location, error) { return nil, fmt.Errorf("%w: hidden", tlsvar.ErrUnsupported) }, reasonUnsupported},
		{func() (*tlsvar.Location, error) { return nil, errors.New("open: permission denied") }, reasonResolve},
		{func() (*tlsvar.Location, error) { return &tlsvar.Location{Symbol: tlsvar.NodeSymbolName}, nil }, reasonUnsupported},
	} {
		_, err := registry.Locate(tl, tc.resolve)
		if err == nil {
			t.Fatal("Locate: no error")
		}
		if got := locateReason(err); got != tc.want {
			t.Errorf("%v: %q, want %q", err, got, tc.want)
		}
	}
}
