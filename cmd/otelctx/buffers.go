// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/buffers"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// errNotPublished marks a process without a process context: it publishes
// no OTEP 4947 thread contexts, which is no news when it has a DD_OTEL_CTX
// buffer.
var errNotPublished = errors.New("no process context")

// notPublished keeps pidError's one-line message and is errNotPublished.
type notPublished struct{ error }

func (notPublished) Is(target error) bool { return target == errNotPublished }

// findBuffer searches pid with every buffer search discovery knows
// (buffers.All, each over any executable: the receiver only searches JVMs
// by default; the CLI is asked about one process) and returns the first
// buffer found. --mode ebpf hands it to the sampler (sampler.Target.Buffer).
// Its errors are *bufferError.
func (e *env) findBuffer(pid int) (*publisher.Buffer, error) {
	berr := &bufferError{}
	for _, s := range buffers.All() {
		b, st, err := s.Search(e.proc, safemem.New(e.proc, pid))
		if err != nil {
			berr.add(s.Schema(), err, st.Refused > 0)
			continue
		}
		if st.Valid > 1 {
			e.log.Debug(fmt.Sprintf("pid %d: %d %s buffers, using the first at %#x", pid, st.Valid, bufferName(b.Schema), b.Addr))
		}
		return &b, nil
	}
	return nil, berr
}

// readSlots reads the slots of id's threads in its buffer (one read,
// threads not stopped), which its schema's snapshot reads as slots
// (ddslots.ProcessReader refuses another).
func (e *env) readSlots(id publisher.ProcessID) ([]threadread.Thread, *publisher.Buffer, error) {
	b, err := e.findBuffer(id.PID)
	if err != nil {
		return nil, nil, err
	}
	threads, _, err := ddslots.NewProcessReader(e.proc).Read(id, *b)
	if err != nil {
		berr := &bufferError{}
		berr.add(b.Schema, err, false)
		return nil, b, berr
	}
	return threads, b, nil
}

// bufferError is why no buffer of a process was read: each schema's
// search or read error; absent when every search only found nothing (no
// header refused).
type bufferError struct {
	schemas []string
	errs    []error
	refused bool
}

// add records schema's error; refused: its search refused a header.
func (e *bufferError) add(schema string, err error, refused bool) {
	e.schemas, e.errs = append(e.schemas, schema), append(e.errs, err)
	e.refused = e.refused || refused || !errors.Is(err, scan.ErrNoBuffer)
}

func (e *bufferError) Error() string   { return errors.Join(e.errs...).Error() }
func (e *bufferError) Unwrap() []error { return e.errs }

// names is the schemas searched, as the CLI names them.
func (e *bufferError) names() string {
	n := make([]string, len(e.schemas))
	for i, s := range e.schemas {
		n[i] = bufferName(s)
	}
	return strings.Join(n, " or ")
}

// bufferName is how the CLI names a buffer schema: its name in capitals,
// as its writers name their mapping (DD_OTEL_CTX).
func bufferName(schema string) string { return strings.ToUpper(schema) }

// bufferAbsent reports whether err only says that no buffer is there (not
// that one was refused or could not be read).
func bufferAbsent(err error) bool {
	var be *bufferError
	return errors.As(err, &be) && !be.refused
}

// bufferNote is what otelctx threads says about the buffer search: after
// the OTEP 4947 reason when neither source could be read, or alone when
// only the buffer search failed.
func bufferNote(err error) string {
	var be *bufferError
	if !errors.As(err, &be) {
		return oneLine(err.Error())
	}
	if !be.refused {
		return "no " + be.names() + " buffer either"
	}
	return be.names() + ": " + oneLine(err.Error())
}
