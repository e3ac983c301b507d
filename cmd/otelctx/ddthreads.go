// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// errNotPublished marks a process without a process context: it publishes
// no OTEP 4947 thread contexts, which is no news when it has a DD_OTEL_CTX
// buffer.
var errNotPublished = errors.New("no process context")

// notPublished keeps pidError's one-line message and is errNotPublished.
type notPublished struct{ error }

func (notPublished) Is(target error) bool { return target == errNotPublished }

// findDD searches pid for a Datadog DD_OTEL_CTX buffer, whatever its
// executable (the receiver only searches JVMs by default; the CLI is asked
// about one process). --mode ebpf hands the buffer to the sampler
// (sampler.Target.Buffer).
func (e *env) findDD(pid int) (*publisher.Buffer, error) {
	b, st, err := ddscan.Discover(e.proc, safemem.New(e.proc, pid))
	if err != nil {
		return nil, err
	}
	if st.Valid > 1 {
		e.log.Debug(fmt.Sprintf("pid %d: %d DD_OTEL_CTX buffers, using the first at %#x", pid, st.Valid, b.Addr))
	}
	m := ddscan.Model(b)
	return &m, nil
}

// readDD reads the slots of id's threads in its DD_OTEL_CTX buffer (one
// read, threads not stopped).
func (e *env) readDD(id publisher.ProcessID) ([]threadread.Thread, error) {
	b, err := e.findDD(id.PID)
	if err != nil {
		return nil, err
	}
	threads, _, err := attribution.NewDDSlots(e.proc).Read(id, *b)
	return threads, err
}

// ddAbsent reports whether err only says that no buffer is there (not that
// one was refused or could not be read).
func ddAbsent(err error) bool {
	return errors.Is(err, ddscan.ErrNotFound) && !errors.Is(err, ddotel.ErrBadCapacity) &&
		!errors.Is(err, ddotel.ErrBadVersion) && !errors.Is(err, ddotel.ErrBadSlotSize) && !errors.Is(err, ddotel.ErrBadMagic)
}

// ddNote is what otelctx threads says about the DD_OTEL_CTX search: after
// the OTEP 4947 reason when neither source could be read, or alone when
// only the DD search failed.
func ddNote(err error) string {
	if ddAbsent(err) {
		return "no DD_OTEL_CTX buffer either"
	}
	return "DD_OTEL_CTX: " + oneLine(err.Error())
}
