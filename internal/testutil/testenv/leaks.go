// SPDX-License-Identifier: Apache-2.0

package testenv

import "go.uber.org/goleak"

// Goroutines that live as long as the test process, or a while after the
// last test, on purpose (their packages' tests check the names).
const (
	// ReaderHelperGoroutine serves the memory reader helper's replies
	// (internal/proc/remote) until the helper has been idle for a minute.
	ReaderHelperGoroutine = "github.com/otelctx/otelctx/internal/proc/remote.(*helper).run"
	// ReadWorkerGoroutine is one of remote's pooled read workers: they end
	// 200 ms after their last read, which a loaded host can stretch past
	// goleak's retries.
	ReadWorkerGoroutine = "github.com/otelctx/otelctx/internal/proc/remote.(*worker).run"
	// FUSEWatchdogGoroutine keeps the thread whose exit tells testfuse's
	// watchdog that the test process is dying.
	FUSEWatchdogGoroutine = "github.com/otelctx/otelctx/internal/testutil/testfuse.holdThread"
)

// LongLived has goleak ignore those goroutines.
var LongLived = []goleak.Option{
	goleak.IgnoreAnyFunction(ReaderHelperGoroutine),
	goleak.IgnoreAnyFunction(ReadWorkerGoroutine),
	goleak.IgnoreTopFunction(FUSEWatchdogGoroutine),
}
