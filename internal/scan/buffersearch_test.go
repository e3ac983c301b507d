// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
)

// TestBufferSearchOrder: a process gets the searches its scope selects, in
// the order of Options.Buffers, until one finds a buffer.
func TestBufferSearchOrder(t *testing.T) {
	exe := ddwriter.Build(t, ddwriter.Glibc)
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	java := filepath.Join(t.TempDir(), "java")
	if err := os.WriteFile(java, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		// missing and found: the searches run without a buffer, and when
		// the first search finds it.
		missing, found int
	}{
		{java, 2, 1}, // both select a java
		{exe, 1, 1},  // the JVM search does not select it
	} {
		f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll), ddscan.New(ddscan.SearchJava)}})
		w := ddwriter.StartBinary(t, tc.path, ddwriter.Options{Capacity: 16, Threads: 1})
		w.Header(0, 0, 0, 0) // no buffer yet: not a candidate header either
		f.own(w.PID)
		evs, st := f.scan()
		if len(evs) != 0 || st.BufferSearches != tc.missing || st.BuffersFound != 0 {
			t.Errorf("%s without a buffer: %s, %+v; want %d searches", filepath.Base(tc.path), describe(evs), st, tc.missing)
		}
		w.Header(ddotel.Magic, 1, 16, 32)
		f.s.Rescan(w.PID)
		evs, st = f.poll()
		ev := findEvent(evs, publisher.Found, w.PID)
		if ev == nil || ev.Process.Buffer == nil || ev.Process.Buffer.Schema != ddotel.SchemaName ||
			st.BufferSearches != tc.found || st.BuffersFound != 1 {
			t.Errorf("%s with a buffer: %s, %+v; want it found by the first of %d searches", filepath.Base(tc.path), describe(evs), st, tc.found)
		}
		w.Kill()
	}
}

// TestBufferSearchLimit: a candidate keeps the searches its executable
// selects in one byte.
func TestBufferSearchLimit(t *testing.T) {
	searches := make([]scan.BufferSearch, 9)
	for i := range searches {
		searches[i] = ddscan.New(ddscan.SearchJava)
	}
	if s, err := scan.New(scan.Options{Buffers: searches}); err == nil {
		s.Close()
		t.Fatal("9 buffer searches accepted")
	}
	s, err := scan.New(scan.Options{Buffers: searches[:8]})
	if err != nil {
		t.Fatalf("8 buffer searches: %v", err)
	}
	s.Close()
}
