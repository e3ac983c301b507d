// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"fmt"

	"go.opentelemetry.io/collector/component"
)

// Provider is implemented by the processctx extension: the components that
// name it reach its Watcher through the collector's host.
type Provider interface {
	Watcher() *Watcher
}

// FromHost finds the Watcher of the processctx extension id among the
// host's extensions (the collector starts extensions before pipelines).
func FromHost(host component.Host, id component.ID) (*Watcher, error) {
	var ext component.Component
	if host != nil {
		ext = host.GetExtensions()[id]
	}
	if ext == nil {
		return nil, fmt.Errorf("no extension %q in this collector: add `%s: {}` under extensions: and list it in service.extensions",
			id, id)
	}
	p, ok := ext.(Provider)
	if !ok {
		return nil, fmt.Errorf("extension %q is not a processctx extension (%T): name a processctx extension, e.g. processctx or processctx/<name>",
			id, ext)
	}
	return p.Watcher(), nil
}
