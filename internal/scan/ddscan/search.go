// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan

import (
	"errors"
	"os"
	"syscall"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
)

// Mode says which processes a Search searches for a DD_OTEL_CTX buffer.
type Mode uint8

// Search modes.
const (
	// SearchNone: no process is searched (the zero value).
	SearchNone Mode = iota
	// SearchJava: processes that look like a JVM (the Datadog Java
	// profiler is the only known writer): executable named java, or
	// libjvm.so mapped.
	SearchJava
	// SearchAll: every process. Finding a buffer by its magic reads the
	// start of each private anonymous mapping (and, failing that, resident
	// pages inside them), which is more work per process than the
	// OTEL_CTX name lookup.
	SearchAll
)

// javaExecutable and jvmLibrary select a JVM: a process that maps the
// JVM's shared library runs Java, whatever its executable is called (a
// launcher embedding the JVM).
const (
	javaExecutable = "java"
	jvmLibrary     = "/libjvm.so"
)

// Search is the scanner's DD_OTEL_CTX plug-in (scan.BufferSearch): Discover
// over the processes its Mode selects, Revalidate at each poll.
type Search struct{ mode Mode }

// New returns the search over the processes mode selects.
func New(mode Mode) Search { return Search{mode: mode} }

var _ scan.BufferSearch = Search{}

// Schema is the format's name, ddotel.SchemaName.
func (Search) Schema() string { return ddotel.SchemaName }

// Scope follows the mode: every process, the JVMs, or none.
func (s Search) Scope() scan.Scope {
	switch s.mode {
	case SearchAll:
		return scan.Scope{Every: true}
	case SearchJava:
		return scan.Scope{Executable: javaExecutable, Library: jvmLibrary}
	}
	return scan.Scope{}
}

// Search runs Discover on the process mem reads.
func (Search) Search(procRoot string, mem *safemem.Memory) (publisher.Buffer, scan.SearchStats, error) {
	b, ds, err := Discover(procRoot, mem)
	st := scan.SearchStats{Refused: ds.Refused, RefusedAt: ds.RefusedAt, Valid: ds.Valid}
	if err != nil {
		return publisher.Buffer{}, st, err
	}
	return Model(b), st, nil
}

// Check runs Revalidate on b.
func (Search) Check(mem *safemem.Memory, b publisher.Buffer) error {
	return Revalidate(mem, Layout(b))
}

// Lost reports whether a failed Check says the buffer is gone: the process
// is gone, the header's page or mapping went away (not written any more,
// unmapped, cut short, or a file's page now: safemem refuses it), or the
// header changed. Other failures (EMFILE or EINTR opening or reading
// pagemap, a permission refused for a moment) say nothing about the
// buffer.
func (Search) Lost(err error) bool {
	for _, gone := range []error{
		remote.ErrProcessGone, os.ErrNotExist, syscall.ESRCH,
		ddotel.ErrHeaderGone, remote.ErrBadAddress, remote.ErrShortRead, safemem.ErrFileBacked,
		ddotel.ErrShort, ddotel.ErrBadMagic, ddotel.ErrBadVersion, ddotel.ErrBadSlotSize, ddotel.ErrBadCapacity,
	} {
		if errors.Is(err, gone) {
			return true
		}
	}
	return false
}

// Model is b as discovery hands it out: a buffer of the format's schema
// (the readers find how to read it in the registry by that name).
func Model(b ddotel.Buffer) publisher.Buffer {
	return publisher.Buffer{Schema: ddotel.SchemaName, Addr: b.Addr, Capacity: b.Capacity, MappingName: b.MappingName}
}

// Layout is a buffer Model made, as the format's type again (Revalidate's).
func Layout(b publisher.Buffer) ddotel.Buffer {
	return ddotel.Buffer{Addr: b.Addr, Capacity: b.Capacity, MappingName: b.MappingName}
}
