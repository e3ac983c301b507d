// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package conformance runs the thread-context conformance matrix
// (internal/testutil/threadpub) end to end through the ptrace reader: the resolver
// locates otel_thread_ctx_v1, every thread is stopped with ptrace, and the
// records read must equal what the threads say they published.
package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// snapshotEnv makes the test binary the reader: the publishers are children
// of the test process, which waits for them (os/exec), and a traced child's
// stops are reported to its parent's waits. A collector is never its
// targets' parent, so the reader runs in a child of its own, as in
// production.
const snapshotEnv = "OTELCTX_CONFORMANCE_SNAPSHOT"

func TestMain(m *testing.M) {
	if v := os.Getenv(snapshotEnv); v != "" {
		os.Exit(snapshotMain(v))
	}
	os.Exit(threadpub.Main(m))
}

// cellResult is one line of the summary.
type cellResult struct {
	cell    string
	outcome string // "ok", "unsupported: ...", "FAIL"
	detail  string
}

// record builds worker k's distinct record for a cell.
func record(k int) threadpub.Record {
	var r threadpub.Record
	for i := range r.TraceID {
		r.TraceID[i] = byte(0x10*k + i + 1)
	}
	for i := range r.SpanID {
		r.SpanID[i] = byte(0xa0 + 0x10*k + i)
	}
	r.Flags = uint8(k % 2)
	switch k {
	case 0:
		r.Attrs = map[uint8]string{0: "/api/v1/users", 1: "GET"}
	case 1:
		r.Attrs = map[uint8]string{2: "user-1", 1: "POST"}
	default:
		r.Attrs = map[uint8]string{0: fmt.Sprintf("/route/%d", k)}
	}
	return r
}

var keyMapNames = []string{"http.route", "http.request.method", "user.id"}

func TestPtraceMatrix(t *testing.T) {
	testenv.RequireRoot(t)
	var mu sync.Mutex
	var results []cellResult
	add := func(r cellResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	t.Run("cells", func(t *testing.T) {
		for _, cell := range threadpub.Matrix() {
			t.Run(cell.String(), func(t *testing.T) {
				t.Parallel()
				res := cellResult{cell: cell.String(), outcome: "FAIL"}
				defer func() { add(res) }()
				outcome, detail := runCell(t, cell)
				if !t.Failed() {
					res.outcome = outcome
				}
				res.detail = detail
			})
		}
	})
	sort.Slice(results, func(i, j int) bool { return results[i].cell < results[j].cell })
	var b strings.Builder
	counts := map[string]int{}
	for _, r := range results {
		fmt.Fprintf(&b, "\n  %-40s %-12s %s", r.cell, r.outcome, r.detail)
		counts[strings.SplitN(r.outcome, ":", 2)[0]]++
	}
	t.Logf("ptrace conformance matrix (%d cells: %d ok, %d unsupported, %d failed):%s",
		len(results), counts["ok"], counts["unsupported"], counts["FAIL"], b.String())
}

// runCell checks one cell and returns its outcome and a short detail.
func runCell(t *testing.T, cell threadpub.Cell) (string, string) {
	p := threadpub.Start(t, cell)
	p.Threads(5)
	truths := map[int]threadpub.Truth{}
	records := map[int]threadpub.Record{}
	for k := 0; k < 3; k++ {
		records[k] = record(k)
		tr := p.Set(k, records[k])
		truths[tr.TID] = tr
		records[tr.TID] = records[k]
	}
	// Worker 3 withdraws its record after publishing one; worker 4 never
	// touches the variable (its dynamic TLS block may not even exist).
	p.Set(3, record(3))
	cleared := p.Clear(3)
	untouched := p.Info(4)

	snap := snapshot(t, p.PID)
	if snap.Unsupported != "" {
		// Listed in the summary, not skipped: an unsupported cell is a
		// known gap of the resolver, visible in every run.
		t.Logf("%s: resolver: %s", cell, snap.Unsupported)
		return "unsupported", snap.Unsupported
	}
	if snap.NotFound != "" {
		t.Fatalf("resolver: %s", snap.NotFound)
	}
	if strings.Join(snap.KeyMap, ",") != strings.Join(keyMapNames, ",") {
		t.Fatalf("key map %v", snap.KeyMap)
	}
	wantTable := tlsvar.SymbolTableDynsym
	if cell.SymtabOnly {
		wantTable = tlsvar.SymbolTableSymtab // not exported: a writer outside the OTEP, still read
	}
	if snap.SymbolTable != wantTable {
		t.Errorf("variable found in %q, want %q", snap.SymbolTable, wantTable)
	}
	threads, st := snap.Threads, snap.Stats
	tids, err := ptrace.ListThreads("/proc", p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != len(tids) {
		t.Errorf("%d threads read, the process has %d", len(threads), len(tids))
	}
	seen := map[int]snapThread{}
	for _, th := range threads {
		seen[th.TID] = th
	}
	for tid, tr := range truths {
		th, ok := seen[tid]
		if !ok {
			t.Errorf("tid %d not in the snapshot", tid)
			continue
		}
		if th.ThreadPointer != tr.ThreadPointer {
			t.Errorf("tid %d: thread pointer %#x, the thread says %#x", tid, th.ThreadPointer, tr.ThreadPointer)
		}
		if th.Record == nil {
			t.Errorf("tid %d: no record (%s: %v)", tid, th.Reason, th.Err)
			continue
		}
		want := records[tid]
		if th.Record.TraceID != threadctx.TraceID(want.TraceID) || th.Record.SpanID != threadctx.SpanID(want.SpanID) || th.Record.TraceFlags != want.Flags {
			t.Errorf("tid %d: read %s/%s/%d, published %x/%x/%d", tid, th.Record.TraceID, th.Record.SpanID, th.Record.TraceFlags,
				want.TraceID, want.SpanID, want.Flags)
		}
		wantAttrs := map[string]string{}
		for k, v := range want.Attrs {
			wantAttrs[keyMapNames[k]] = v
		}
		if fmt.Sprint(th.Attributes) != fmt.Sprint(wantAttrs) || th.Record.Truncated {
			t.Errorf("tid %d: attributes %v (truncated %v), published %v", tid, th.Attributes, th.Record.Truncated, wantAttrs)
		}
	}
	wantCleared := threadread.ReasonNullPointer
	if cell.Writer == threadpub.ValidFlip {
		wantCleared = threadread.ReasonNotValid
	}
	if th := seen[cleared.TID]; th.Record != nil || th.Reason != wantCleared {
		t.Errorf("cleared tid %d: record %v, reason %q, want %q", cleared.TID, th.Record, th.Reason, wantCleared)
	}
	if th := seen[untouched.TID]; th.Record != nil || !threadread.NoContext(th.Reason) || th.Reason == threadread.ReasonNotValid {
		t.Errorf("untouched tid %d: record %v, reason %q (%v)", untouched.TID, th.Record, th.Reason, th.Err)
	}
	if st.Ptrace.AlreadyTraced != 0 || st.Ptrace.Exited != 0 || st.Ptrace.TimedOut != 0 {
		t.Errorf("ptrace stats %+v", st.Ptrace)
	}
	return "ok", fmt.Sprintf("%d threads, %d records, untouched: %s, from %s", len(threads), st.Records, seen[untouched.TID].Reason, snap.SymbolTable)
}

// snapThread is one thread as the reader process reports it.
type snapThread struct {
	TID           int
	ThreadPointer uint64
	Record        *threadctx.Record
	Reason        string
	Err           string
	Attributes    map[string]string
}

// snapResult is what the reader process prints.
type snapResult struct {
	Unsupported string
	// NotFound is set when no module exports the variable.
	NotFound string
	// SymbolTable is where the resolver found the variable.
	SymbolTable string
	KeyMap      []string
	Threads     []snapThread
	Stats       threadread.Stats
}

// snapshot runs the reader process on pid.
func snapshot(t *testing.T, pid int) snapResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), snapshotEnv+"="+strconv.Itoa(pid))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reader process: %v\n%s", err, out)
	}
	var r snapResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("reader output: %v\n%s", err, out)
	}
	return r
}

// snapshotMain is the reader process: the process context as the receiver
// and the CLI read it, the resolver, one ptrace snapshot.
func snapshotMain(v string) int {
	pid, _ := strconv.Atoi(v)
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	sc, err := scan.New(scan.Options{})
	if err != nil {
		return fail(err)
	}
	defer sc.Close()
	proc, err := sc.ReadPID(pid)
	if err != nil {
		return fail(fmt.Errorf("process context: %w", err))
	}
	tl := proc.Context.ThreadLocal
	sch, err := registry.ForVersion(tl.SchemaVersion)
	if err != nil {
		return fail(err)
	}
	var r snapResult
	r.KeyMap = tl.AttributeKeyMap
	loc, err := tlsvar.Resolve("/proc", pid)
	switch {
	case errors.Is(err, tlsvar.ErrUnsupported):
		r.Unsupported = err.Error()
	case errors.Is(err, tlsvar.ErrNotFound):
		r.NotFound = err.Error()
	case err != nil:
		return fail(fmt.Errorf("resolve: %w", err))
	default:
		r.SymbolTable = loc.SymbolTable
		// A generous stop timeout: this checks what is read, not how fast
		// a thread stops on a loaded 2-CPU machine.
		threads, st, err := threadread.Snapshot(pid, schema.Variable{Schema: sch, Location: loc}, threadread.Options{KeyMap: tl.AttributeKeyMap, StopTimeout: 2 * time.Second})
		if err != nil {
			return fail(fmt.Errorf("snapshot: %w", err))
		}
		// error values do not survive JSON (an interface decodes into
		// nothing): the threads carry their errors as text below.
		for i := range st.Ptrace.Threads {
			st.Ptrace.Threads[i].Err = nil
		}
		r.Stats = st
		for _, th := range threads {
			st := snapThread{TID: th.TID, ThreadPointer: th.ThreadPointer, Record: th.Record, Reason: th.Reason, Attributes: th.Attributes}
			if th.Err != nil {
				st.Err = th.Err.Error()
			}
			r.Threads = append(r.Threads, st)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return fail(err)
	}
	return 0
}

// TestPtraceRefusedVariants lists the variables the reader must refuse (not
// TLS, protected or hidden visibility, only Local Dynamic accesses): the
// reader process resolves nothing and stops no thread.
func TestPtraceRefusedVariants(t *testing.T) {
	testenv.RequireRoot(t)
	var lines []string
	for _, v := range []threadpub.Variant{threadpub.NotTLS, threadpub.Protected, threadpub.Hidden, threadpub.LocalDynamic} {
		cell := threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC, Variant: v}
		t.Run(cell.String(), func(t *testing.T) {
			p := threadpub.Start(t, cell)
			p.Threads(1)
			snap := snapshot(t, p.PID)
			switch {
			case snap.Unsupported != "":
				lines = append(lines, fmt.Sprintf("%-40s unsupported  %s", cell, snap.Unsupported))
			case snap.NotFound != "":
				lines = append(lines, fmt.Sprintf("%-40s not found    %s", cell, snap.NotFound))
			default:
				t.Errorf("resolved and read %d threads", len(snap.Threads))
			}
			if len(snap.Threads) != 0 || snap.Stats.Ptrace.Threads != nil {
				t.Errorf("threads were stopped: %+v", snap.Stats.Ptrace)
			}
		})
	}
	t.Logf("refused variants:\n  %s", strings.Join(lines, "\n  "))
}
