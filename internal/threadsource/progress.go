// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

// Stage is a part of a source that can be stuck: busy from Begin to End,
// and stuck when busy for too long (the watcher's stall check).
type Stage int

// The stages of a source.
const (
	StageReader Stage = iota // a ptrace snapshot pass; the eBPF sampler's sync
	StageSample              // the handling of one eBPF sample (a key-map refresh)
)

// Progress is told when a stage begins and ends; safe for concurrent use.
type Progress interface {
	Begin(Stage)
	End(Stage)
}

// unwatched is the Progress of a source nobody watches (tests).
type unwatched struct{}

func (unwatched) Begin(Stage) {}
func (unwatched) End(Stage)   {}
