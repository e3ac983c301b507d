// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// KeyMapRefresher re-reads p's threadlocal.attribute_key_map (Options.
// RefreshKeyMap) where its process context is mapped, for a record that
// uses a key index the map read first lacked (the map is append-only). It
// reads through safemem: the publisher chose the address. The collector's
// thread sources and the CLI share it.
func KeyMapRefresher(procRoot string, p *publisher.Process, limits processctx.Limits) func() ([]string, error) {
	pid, addr := p.ID.PID, p.MappingAddr
	return func() ([]string, error) {
		c, _, err := processctx.Read(safemem.New(procRoot, pid), addr, limits)
		return c.ThreadLocal.AttributeKeyMap, err
	}
}
