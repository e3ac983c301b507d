// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"testing"
	"time"
)

// WaitTimeout bounds every wait for something that must happen.
const WaitTimeout = 20 * time.Second

// Eventually polls cond until it holds, failing the test after WaitTimeout.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}
