// SPDX-License-Identifier: Apache-2.0

//go:build linux

package publisher

// EnvironmentRead is what discovery read of one process identity's
// environment (package envscan), for the catalog to keep.
type EnvironmentRead struct {
	Outcome EnvironmentOutcome
	// Owner is who the process's costs are charged to (package owner).
	Owner int
	// Process is the process as its environment names it (nil: it names
	// nothing): no context, its Environment the attributes.
	Process *Process
	// Dropped: variables dropped (malformed, oversized, too many keys).
	Dropped int
	// Exit tells whether the process exited (nil: nothing can tell
	// without a /proc read).
	Exit ExitWatch
}

// EnvironmentOutcome says how an environment read ended.
type EnvironmentOutcome uint8

// Environment read outcomes.
const (
	// EnvironmentReadOK: read (variables past the size cap unseen).
	EnvironmentReadOK EnvironmentOutcome = iota
	// EnvironmentTimedOut: the read was abandoned at its deadline.
	EnvironmentTimedOut
	// EnvironmentRefused: too many reads are blocked.
	EnvironmentRefused
	// EnvironmentFailed: the process left, or its PID changed hands,
	// before or during the read.
	EnvironmentFailed
	// EnvironmentHandedOver: read, but the PID changed hands before the
	// process could be bound to Exit.
	EnvironmentHandedOver
)

// ExitWatch tells whether a process has exited without a /proc read (a
// pidfd: while the process has not exited it holds its PID).
type ExitWatch interface {
	// Alive is false once the process exited (exited: known so) or the
	// watch failed; the watch is then closed.
	Alive() (alive, exited bool)
	Close()
}
