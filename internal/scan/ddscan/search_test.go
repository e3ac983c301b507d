// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestSearch: the scanner's plug-in finds a writer's buffer as a buffer of
// the format's schema, checks it, and tells a header gone from a check
// that failed; a process without one is the scanner's ErrNoBuffer.
func TestSearch(t *testing.T) {
	testenv.RequireRoot(t)
	s := ddscan.New(ddscan.SearchAll)
	if s.Schema() != ddotel.SchemaName {
		t.Fatalf("schema %q", s.Schema())
	}
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	b, st, err := s.Search("/proc", safemem.New("", w.PID))
	if err != nil || b.Schema != ddotel.SchemaName || b.Addr != w.Buf || b.Capacity != 16 || st.Valid != 1 || st.Refused != 0 {
		t.Fatalf("found %+v, %+v, %v; writer's at %#x", b, st, err, w.Buf)
	}
	if err := s.Check(safemem.New("", w.PID), b); err != nil {
		t.Fatalf("check: %v", err)
	}
	w.Header(ddotel.Magic, 1, 32, 32) // another capacity: another buffer
	if err := s.Check(safemem.New("", w.PID), b); err == nil || !s.Lost(err) {
		t.Fatalf("check of a changed header: %v, lost %v", err, err != nil && s.Lost(err))
	}
	if s.Lost(syscall.EMFILE) {
		t.Error("EMFILE loses the buffer")
	}
	w.Header(0, 0, 0, 0)
	if _, _, err := s.Search("/proc", safemem.New("", w.PID)); !errors.Is(err, scan.ErrNoBuffer) || err.Error() != "dd_otel_ctx: no buffer found" {
		t.Fatalf("no buffer: %v", err)
	}
	if l := ddscan.Layout(b); ddscan.Model(l) != b {
		t.Fatalf("Model(Layout(%+v)) = %+v", b, ddscan.Model(l))
	}
}

// TestSearchScope: none, the JVMs, or every process.
func TestSearchScope(t *testing.T) {
	for mode, want := range map[ddscan.Mode]scan.Scope{
		ddscan.SearchNone: {},
		ddscan.SearchJava: {Executable: "java", Library: "/libjvm.so"},
		ddscan.SearchAll:  {Every: true},
	} {
		if got := ddscan.New(mode).Scope(); got != want {
			t.Errorf("mode %d: scope %+v, want %+v", mode, got, want)
		}
	}
}
