// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

// DefaultEnvLookups is the budget of /proc look-ups one message's PIDs get
// (EnvBudget): a failed look-up of an absent PID costs some 4 µs, so a
// message of 20,000 samples naming 20,000 absent PIDs costs at most ~50 ns
// more per sample (BENCHMARKS.md, "Hostile PIDs").
const DefaultEnvLookups = 256

// maxAbsent bounds the PIDs remembered absent; past it they are forgotten
// at once (a look-up again, within the budget, is the only cost).
const maxAbsent = 4096

// EnvBudget is how many more /proc look-ups (a PID's stat and, for a new
// process, its environment) the environment source may make for one
// message. A nil *EnvBudget is unbounded.
type EnvBudget struct{ left int }

// NewEnvBudget is a budget of n look-ups.
func NewEnvBudget(n int) EnvBudget { return EnvBudget{left: n} }

// take spends one look-up; false when none is left.
func (b *EnvBudget) take() bool {
	if b == nil {
		return true
	}
	if b.left <= 0 {
		return false
	}
	b.left--
	return true
}
