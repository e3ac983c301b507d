// SPDX-License-Identifier: Apache-2.0

//go:build linux

package safemem

import (
	"os"

	"github.com/otelctx/otelctx/internal/proc/pagemap"
)

// heldPresent reports whether every page of [start, end) is in the page
// tables by the held pagemap (UsePagemap), at most maxResidencyPages; a
// longer range is not looked at.
func (m *Memory) heldPresent(start, end uint64) bool {
	if !m.pm.IsOpen() || end <= start {
		return false
	}
	page := uint64(os.Getpagesize())
	first, last := start/page, (end-1)/page
	n := last - first + 1
	if n > maxResidencyPages {
		return false
	}
	ents, err := m.pm.Read(first, int(n))
	return err == nil && pagemap.AllPresent(ents)
}
