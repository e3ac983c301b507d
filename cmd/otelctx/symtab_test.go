// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// TestThreadsSymtabOnly: a plain -static writer (glibc, musl) has its
// variable only in .symtab; both modes read it and -v says so, whatever
// the output format.
func TestThreadsSymtabOnly(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		cell := threadpub.Cell{Libc: l, Where: threadpub.Exe, Dialect: threadpub.TLSDESC, Static: true, SymtabOnly: true}
		t.Run(strings.ReplaceAll(cell.String(), "/", "-"), func(t *testing.T) {
			p := threadpub.Start(t, cell)
			p.Threads(1)
			a := p.Set(0, threadpub.Record{TraceID: hexBytes("0af7651916cd43dd8448eb211c80319c"), SpanID: spanBytes("b7ad6b7169203331"),
				Flags: 1, Attrs: map[uint8]string{0: "/static"}})
			logged := func(r result) {
				t.Helper()
				if !strings.Contains(r.stderr, `"symbol_table": "symtab"`) || !strings.Contains(r.stderr, "located in the executable's .symtab") {
					t.Errorf("-v does not say the variable came from .symtab:\n%s", r.stderr)
				}
			}

			r := mustSucceed(t, "-v", "threads", "--json", strconv.Itoa(p.PID))
			found := false
			for _, row := range jsonRows(t, r) {
				if int(row["tid"].(float64)) == a.TID {
					found = row["span_id"] == "b7ad6b7169203331" && row["source"] == "otep4947"
				}
			}
			if !found {
				t.Errorf("worker %d's record not read:\n%s", a.TID, r.stdout)
			}
			logged(r)
			r = mustSucceed(t, "threads", "-v", strconv.Itoa(p.PID))
			if !strings.Contains(r.stdout, "0af7651916cd43dd8448eb211c80319c") {
				t.Errorf("table:\n%s", r.stdout)
			}
			logged(r)
			// Without -v, nothing on stderr.
			if r = mustSucceed(t, "threads", strconv.Itoa(p.PID)); r.stderr != "" {
				t.Errorf("stderr without -v: %q", r.stderr)
			}

			t.Run("ebpf", func(t *testing.T) {
				samplertest.Require(t)
				// A worker switching spans (busy, on a CPU, where the
				// sampler sees it) for 5 s, longer than the CLI's start-up
				// and 1 s of sampling.
				tid := p.Switch(0, 250, 20, filepath.Join(t.TempDir(), "truth"))
				r := mustSucceed(t, "-v", "threads", "--mode", "ebpf", "--duration", "1s", "--frequency", "997", "--json", strconv.Itoa(p.PID))
				p.Wait(0)
				sampled := false
				for _, row := range jsonRows(t, r) {
					if int(row["tid"].(float64)) == tid && row["source"] == "otep4947" && row["trace_id"] != nil {
						sampled = true
					}
				}
				if !sampled {
					t.Errorf("no record of the switching worker %d sampled:\n%s", tid, r.stdout)
				}
				logged(r)
			})
		})
	}
}
