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
// host's extensions (the collector starts extensions before pipelines),
// under either spelling of its type (process_ctx, or processctx, the
// deprecated alias): an id of one finds an extension defined with the other.
func FromHost(host component.Host, id component.ID) (*Watcher, error) {
	var ext component.Component
	if host != nil {
		exts := host.GetExtensions()
		ext = exts[id]
		if ext == nil {
			// The extension's type has two spellings while the deprecated
			// one is accepted: a configuration may define either, and an
			// extension: setting may name either.
			if other, ok := otherSpelling(id); ok {
				ext = exts[other]
			}
		}
	}
	if ext == nil {
		return nil, fmt.Errorf("no extension %q in this collector: add `%s: {}` under extensions: and list it in service.extensions",
			id, id)
	}
	p, ok := ext.(Provider)
	if !ok {
		return nil, fmt.Errorf("extension %q is not a process_ctx extension (%T): name a process_ctx extension, e.g. process_ctx or process_ctx/<name>",
			id, ext)
	}
	return p.Watcher(), nil
}

// The processctx extension's type and its deprecated alias (the type
// before 0.4): extension/processctxextension's metadata.yaml.
var (
	extensionType      = component.MustNewType("process_ctx")
	extensionTypeAlias = component.MustNewType("processctx")
)

// otherSpelling returns id under the other spelling of the extension's type,
// its name kept: process_ctx/a for processctx/a and the reverse.
func otherSpelling(id component.ID) (component.ID, bool) {
	switch id.Type() {
	case extensionType:
		return component.NewIDWithName(extensionTypeAlias, id.Name()), true
	case extensionTypeAlias:
		return component.NewIDWithName(extensionType, id.Name()), true
	}
	return component.ID{}, false
}
