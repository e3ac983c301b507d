// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// What resolutions may allocate from foreign input (maps lines, mount
// tables, ELF files), accounted before each allocation: per resolution,
// and for all resolutions in flight together (abandoned ones included;
// SetMaxTotalMemory, the processctx extension's part of
// limits.max_process_memory). A resolution needs about 100 KiB (buffers,
// one line per module); the cached facts are bounded apart (maxCached
// entries of fixed size).
const (
	MaxResolutionMemory = 2 << 20
	MaxTotalMemory      = 8 << 20 // the default of SetMaxTotalMemory
)

// ErrLimit: the process's files or mappings exceed a bound of the resolver
// (memory, modules, the read budget of a file); the wrapped error says
// which. Refused, counted and logged by the caller, never allocated.
var ErrLimit = errors.New("refused: over the TLS resolver's bounds")

var totalMemory = struct {
	sync.Mutex
	used, limit int64
}{limit: MaxTotalMemory}

// SetMaxTotalMemory bounds what all resolutions in flight may allocate
// (MaxTotalMemory when n <= 0), at least one resolution's MaxResolutionMemory.
func SetMaxTotalMemory(n int64) {
	if n <= 0 {
		n = MaxTotalMemory
	}
	totalMemory.Lock()
	totalMemory.limit = max(n, MaxResolutionMemory)
	totalMemory.Unlock()
}

// TotalMemory is what the resolutions in flight hold, and its bound.
func TotalMemory() (used, limit int64) {
	totalMemory.Lock()
	defer totalMemory.Unlock()
	return totalMemory.used, totalMemory.limit
}

// memBudget accounts one resolution's allocations; a nil one accounts
// nothing (unit tests, fuzzing). take fails once the resolution's context
// is done, so an abandoned resolution stops allocating at its next step.
type memBudget struct {
	ctx   context.Context
	left  int64
	taken int64
}

func newMemBudget(ctx context.Context) *memBudget {
	return &memBudget{ctx: ctx, left: MaxResolutionMemory}
}

func (b *memBudget) take(n int) error {
	if b == nil {
		return nil
	}
	if err := b.alive(); err != nil {
		return err
	}
	if int64(n) > b.left {
		return fmt.Errorf("%w: more than %d KiB for one resolution", ErrLimit, MaxResolutionMemory>>10)
	}
	totalMemory.Lock()
	if limit := totalMemory.limit; totalMemory.used+int64(n) > limit {
		totalMemory.Unlock()
		// Others' resolutions hold it: nothing learnt about this process.
		return fmt.Errorf("%w: %w: more than %d KiB for all resolutions in flight", ErrTransient, ErrLimit, limit>>10)
	}
	totalMemory.used += int64(n)
	totalMemory.Unlock()
	b.left -= int64(n)
	b.taken += int64(n)
	return nil
}

// alive is an abandoned resolution's end.
func (b *memBudget) alive() error {
	if b == nil || b.ctx == nil {
		return nil
	}
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("%w: resolution abandoned: %w", ErrTransient, err)
	}
	return nil
}

// release returns what the resolution took to the total (its buffers are
// garbage once it returns; the facts it cached are bounded apart).
func (b *memBudget) release() {
	if b == nil {
		return
	}
	totalMemory.Lock()
	totalMemory.used -= b.taken
	totalMemory.Unlock()
	b.taken = 0
}

// memoryInFlight is the total taken by resolutions not yet returned (tests).
func memoryInFlight() int64 {
	totalMemory.Lock()
	defer totalMemory.Unlock()
	return totalMemory.used
}
