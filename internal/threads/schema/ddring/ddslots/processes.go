// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots

import (
	"fmt"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// ProcessReader reads the DD_OTEL_CTX slots of processes without stopping
// their threads (ReadThreads), keeping per process identity and buffer the
// slot history (ddotel.Owners) and the namespace TIDs (pidns.TIDs) that
// successive reads need. Not safe for concurrent use.
type ProcessReader struct {
	procRoot string
	procs    map[publisher.ProcessID]processSlots
}

type processSlots struct {
	buf    ddotel.Buffer
	owners *ddotel.Owners
	ns     *pidns.TIDs
}

// NewProcessReader returns a reader of processes under procRoot ("" = "/proc").
func NewProcessReader(procRoot string) *ProcessReader {
	return &ProcessReader{procRoot: procRoot, procs: map[publisher.ProcessID]processSlots{}}
}

// Read reads the slots of id's threads in buffer b, whose schema
// (registry.ForBuffer) a snapshot reads as slots. A read thread list is
// never nil: an error says the slots could not be read at all.
func (d *ProcessReader) Read(id publisher.ProcessID, buf publisher.Buffer) ([]threadread.Thread, ThreadStats, error) {
	s, err := registry.ForBuffer(buf)
	if err != nil {
		return nil, ThreadStats{}, fmt.Errorf("ddslots: %w", err)
	}
	b, err := s.Slots(buf)
	if err != nil {
		return nil, ThreadStats{}, fmt.Errorf("ddslots: %s buffers are not read as slots: %w", s.Name(), err)
	}
	st, ok := d.procs[id]
	if !ok || st.buf != b {
		// Another buffer (an exec) starts another history.
		st = processSlots{buf: b, owners: ddotel.NewOwners(), ns: pidns.NewTIDs(d.procRoot, id.PID)}
		d.procs[id] = st
	}
	threads, stats, err := ReadThreads(d.procRoot, id.PID, b, st.owners, st.ns)
	if err != nil {
		return nil, stats, err
	}
	if threads == nil {
		threads = []threadread.Thread{} // read, no thread: not a failure
	}
	return threads, stats, nil
}

// Retain forgets the processes not in live.
func (d *ProcessReader) Retain(live map[publisher.ProcessID]bool) {
	for id := range d.procs {
		if !live[id] {
			delete(d.procs, id)
		}
	}
}

// Len is the number of processes whose slot history is kept.
func (d *ProcessReader) Len() int { return len(d.procs) }
