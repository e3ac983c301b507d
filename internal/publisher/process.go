// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package publisher is the data model both pipelines share: a process that
// publishes a context (discovery finds it, the catalog keeps it), the events
// that announce it, and the thread-context sources the catalog records.
package publisher

import (
	"time"
	"unsafe"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
)

// ProcessID identifies one process: a PID alone is reused by the kernel,
// PID plus start time is not.
type ProcessID struct {
	PID        int
	StartTicks uint64 // /proc/PID/stat field 22, clock ticks since boot
}

// Process is what discovery knows about one publishing process: one with
// an OTEP 4719 process context (HasContext), a thread-context buffer found
// in its memory (Buffer), or both. A Process is never modified after the
// discovery hands it out: an update is a new one.
type Process struct {
	ID             ProcessID
	CreationTime   time.Time
	ExecutablePath string // "" when /proc/PID/exe is unreadable
	ExecutableName string
	// UID is the process's real UID (/proc/PID/status), -1 when unreadable;
	// read once when the process is first found.
	UID int
	// Owner is who its costs are charged to (package owner): the real
	// UID, the host UID that created its outermost user namespace, or (a
	// negative key) that namespace when root created it; read with UID.
	Owner int
	// Workload is the process's container and pod as its cgroup path
	// says, read once when the process is first found.
	Workload hostinfo.Workload
	// MappingAddr is the address of the OTEL_CTX header in the process (0:
	// no process context; Context is then empty).
	MappingAddr uint64
	// MappingName is the mapping's name in /proc/PID/maps.
	MappingName string
	Context     processctx.Context
	// DecodeStats tells what the limits cut from the published context.
	DecodeStats processctx.DecodeStats
	// FromEnvironment: Context.Resource is what the process names in its
	// environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), string
	// values; it publishes no context (MappingAddr 0). Discovery sets it
	// on a process the catalog knows by its environment alone.
	FromEnvironment bool
	// Buffer is the process's thread-context buffer (nil: none found, or
	// the process is not searched for one: scan.Options).
	Buffer *Buffer
}

// Buffer is a thread-context buffer discovery found in a process's memory,
// for a schema found as a process buffer (a schema.BufferSchema): per-thread
// slots behind a header at Addr.
type Buffer struct {
	// Schema is the buffer's schema name (schema.Schema's Name), which the
	// readers look up in the registry to know how to read it.
	Schema   string
	Addr     uint64
	Capacity uint32 // slots
	// MappingName is "" when found by magic in an unnamed mapping.
	MappingName string
}

// processSize is what a Process holds besides its lists and strings.
var processSize = int(unsafe.Sizeof(Process{}))

// Cost is what p holds in memory, for the bounds in bytes: the Process
// and its context (as the decoder, or discovery for an environment's,
// charged it).
func (p *Process) Cost() int {
	return processSize + p.DecodeStats.DecodedSize
}

// HasContext reports whether the process publishes an OTEP 4719 process
// context (a process tracked only for its Buffer does not).
func (p *Process) HasContext() bool { return p.MappingAddr != 0 }

// EventKind says what happened to a process context.
type EventKind uint8

// Event kinds.
const (
	// Found: a process context was seen for the first time.
	Found EventKind = iota
	// Updated: the published context changed (its content: a stamp
	// rewritten over the same payload is not an update).
	Updated
	// Lost: the process exited, unpublished, or now publishes garbage.
	Lost
)

func (k EventKind) String() string {
	switch k {
	case Found:
		return "found"
	case Updated:
		return "updated"
	case Lost:
		return "lost"
	}
	return "unknown"
}

// Event reports a change. For Updated, Previous is the context before.
type Event struct {
	Kind     EventKind
	Process  *Process
	Previous *Process
}
