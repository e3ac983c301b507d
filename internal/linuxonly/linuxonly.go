// SPDX-License-Identifier: Apache-2.0

// Package linuxonly is what the components are on other operating systems.
// What they read (/proc, process_vm_readv, ptrace, eBPF) exists only on
// Linux; elsewhere they still compile, so that a distribution built for
// several systems can include them, and their Start fails saying so.
package linuxonly

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
)

// ErrUnsupported is what Start returns, wrapped, on other operating systems.
var ErrUnsupported = errors.New("only supported on Linux")

// Component is a component that fails at Start, naming itself.
type Component struct {
	Name string // e.g. "processctx extension"
}

// Start fails with ErrUnsupported.
func (c Component) Start(context.Context, component.Host) error {
	return fmt.Errorf("%s: %w, not %s", c.Name, ErrUnsupported, runtime.GOOS)
}

// Shutdown has nothing to stop.
func (Component) Shutdown(context.Context) error { return nil }

// Config accepts any configuration: a collector configuration written for
// Linux loads, and Start then says why the component cannot run.
type Config struct{}

// Unmarshal ignores every key.
func (*Config) Unmarshal(*confmap.Conf) error { return nil }
