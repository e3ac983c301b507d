// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// The thread publishers are children of the test process, not of the CLI,
// which is what otelctx threads stops: as for a user, the tracer is not the
// target's parent.

func hexBytes(s string) (b [16]byte) {
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		panic(err)
	}
	return b
}

func spanBytes(s string) (b [8]byte) {
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		panic(err)
	}
	return b
}

// threadsJSON runs otelctx threads --json pid, which must succeed, and
// returns the rows it printed, with the run.
func threadsJSON(t *testing.T, pid int) ([]map[string]any, result) {
	t.Helper()
	r := otelctx(t, "threads", "--json", strconv.Itoa(pid))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	return jsonRows(t, r), r
}

// jsonRows decodes the JSON array of objects a run printed.
func jsonRows(t *testing.T, r result) []map[string]any {
	t.Helper()
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	return rows
}

func TestThreadsJSON(t *testing.T) {
	testenv.RequireRoot(t)
	for _, cell := range []threadpub.Cell{
		{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC},
		{Libc: threadpub.Musl, Where: threadpub.Dlopen, Dialect: threadpub.GD, Writer: threadpub.ValidFlip},
	} {
		t.Run(strings.ReplaceAll(cell.String(), "/", "-"), func(t *testing.T) {
			p := threadpub.Start(t, cell)
			p.Threads(3)
			a := p.Set(0, threadpub.Record{TraceID: hexBytes("0af7651916cd43dd8448eb211c80319c"), SpanID: spanBytes("b7ad6b7169203331"),
				Flags: 1, Attrs: map[uint8]string{0: "/api/v1/users", 1: "GET"}})
			b := p.Set(1, threadpub.Record{TraceID: hexBytes("4bf92f3577b34da6a3ce929d0e0e4736"), SpanID: spanBytes("00f067aa0ba902b7"),
				Attrs: map[uint8]string{2: "alice"}})
			idle := p.Info(2)

			got, r := threadsJSON(t, p.PID)
			if len(got) != 4 { // main + 3 workers
				t.Fatalf("%d threads: %s", len(got), r.stdout)
			}
			by := map[int]map[string]any{}
			for _, th := range got {
				by[int(th["tid"].(float64))] = th
			}
			check := func(tid int, want string) {
				t.Helper()
				j, _ := json.Marshal(by[tid])
				if string(j) != want {
					t.Errorf("tid %d:\n got %s\nwant %s", tid, j, want)
				}
			}
			check(a.TID, `{"attributes":{"http.request.method":"GET","http.route":"/api/v1/users"},"source":"otep4947","span_id":"b7ad6b7169203331","tid":`+
				strconv.Itoa(a.TID)+`,"trace_flags":1,"trace_id":"0af7651916cd43dd8448eb211c80319c"}`)
			check(b.TID, `{"attributes":{"user.id":"alice"},"source":"otep4947","span_id":"00f067aa0ba902b7","tid":`+
				strconv.Itoa(b.TID)+`,"trace_flags":0,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`)
			th := by[idle.TID]
			if th == nil || th["record"] != nil || (th["reason"] != "null pointer" && th["reason"] != "not allocated") {
				t.Errorf("idle thread: %v", th)
			}
			if _, ok := th["record"]; !ok {
				t.Errorf(`idle thread lacks "record": null: %v`, th)
			}

			// The table shows the same.
			r = otelctx(t, "threads", strconv.Itoa(p.PID))
			if r.code != 0 || !strings.Contains(r.stdout, "TID") || !strings.Contains(r.stdout, "0af7651916cd43dd8448eb211c80319c") ||
				!strings.Contains(r.stdout, "http.route=/api/v1/users") || !strings.Contains(r.stdout, "(no record: ") {
				t.Errorf("table (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestThreadsFailures(t *testing.T) {
	testenv.RequireRoot(t)
	noContext := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, NoContext: true})
	noSymbol := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Variant: threadpub.NotTLS})
	goPub := testpub.Start(t, testpub.Glibc)
	goPub.Do("schema go_pprof_labels_v1")
	goPub.Publish()
	noSchema := testpub.Start(t, testpub.Glibc)
	noSchema.Publish()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no context", []string{"threads", strconv.Itoa(noContext.PID)}, 1, "no process context"},
		{"no symbol", []string{"threads", strconv.Itoa(noSymbol.PID)}, 1, "cannot locate otel_thread_ctx_v1"},
		{"go schema", []string{"threads", strconv.Itoa(goPub.PID)}, 1, `not handled by this reader: "go_pprof_labels_v1"`},
		{"no schema", []string{"threads", strconv.Itoa(noSchema.PID)}, 1, "no threadlocal.schema_version"},
		{"ebpf no context", []string{"threads", "--mode", "ebpf", strconv.Itoa(noContext.PID)}, 1, "no process context"},
		{"ebpf no symbol", []string{"threads", "--mode", "ebpf", "--duration", "10ms", strconv.Itoa(noSymbol.PID)}, 1, "cannot locate otel_thread_ctx_v1"},
		{"ebpf duration", []string{"threads", "--mode", "ebpf", "--duration", "0s", "1"}, 2, "--duration must be in (0, 1h], got 0s"},
		{"ebpf frequency", []string{"threads", "--mode", "ebpf", "--frequency", "0", "1"}, 2, "--frequency must be in [1, 10000], got 0"},
		{"ebpf read cap", []string{"threads", "--mode", "ebpf", "--read-cap", "2048", "1"}, 2, "--read-cap must be between 28 and 1024"},
		{"bad mode", []string{"threads", "--mode", "magic", "1"}, 2, `--mode must be ptrace or ebpf, got "magic"`},
		{"no pid", []string{"threads"}, 2, "expected one PID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := otelctx(t, tc.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != tc.code || !strings.Contains(lines[0], tc.want) || r.stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d and %q", r.code, r.stderr, r.stdout, tc.code, tc.want)
			}
			if tc.code == 1 && len(lines) != 1 {
				t.Errorf("reason not on one line: %q", r.stderr)
			}
		})
	}
}

// --mode ebpf: a worker switching spans while the CLI samples; every run
// printed for it is one of its spans (or its withdrawal), in time order,
// at a time its record was visible.
func TestThreadsEBPF(t *testing.T) {
	testenv.RequireRoot(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	truthPath := t.TempDir() + "/truth"
	// 2 s of spans, started once the CLI says its 4 s window began (-v):
	// loading the sampler took seconds on a busy host, and the spans were
	// over before it sampled.
	cli := startOtelctx(t, "threads", "-v", "--mode", "ebpf", "--duration", "4s", "--frequency", "997", "--json", strconv.Itoa(p.PID))
	cli.waitLine(t, "DEBUG\tsampling\t")
	tid := p.Switch(0, 20, 100, truthPath)
	p.Wait(0)
	r := cli.wait(t)
	if r.code != 0 {
		if strings.Contains(r.stderr, "eBPF sampler unavailable") {
			testenv.Missing(t, "the eBPF sampler cannot load: "+r.stderr)
		}
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	truth, err := threadpub.ReadSwitchTruth(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	got := jsonRows(t, r)
	seen := map[string]bool{}
	var prev float64
	for _, run := range got {
		if int(run["tid"].(float64)) != tid {
			continue
		}
		first, last := run["time_unix_nano"].(float64), run["last_unix_nano"].(float64)
		if first < prev || last < first || run["samples"].(float64) < 1 {
			t.Errorf("run out of order or malformed: %v", run)
		}
		prev = last
		if run["record"] == nil && run["reason"] != nil {
			continue // before the first span or after the withdrawal
		}
		span, _ := run["span_id"].(string)
		ok := false
		for j, s := range truth.Spans {
			// Span j's record is visible from after the previous span's end
			// was read until before the next span's start is read (the
			// worker can be preempted between a clock read and the switch).
			// Wall-clock times from two clock reads: 1 ms of slack.
			lo, hi := math.Inf(-1), float64(truth.DoneReal)
			if j > 0 {
				lo = float64(truth.Spans[j-1].RealEnd)
			}
			if j+1 < len(truth.Spans) {
				hi = float64(truth.Spans[j+1].RealStart)
			}
			if s.SpanID == span && first >= lo-1e6 && last <= hi+1e6 {
				ok = true
			}
		}
		if !ok {
			t.Errorf("run %v matches no span of the ground truth", run)
		}
		if run["attributes"].(map[string]any)["http.route"] != "/switch" {
			t.Errorf("attributes %v", run["attributes"])
		}
		seen[span] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d of 20 spans seen at 997 Hz over 100 ms each: %s", len(seen), r.stdout)
	}
	t.Logf("%d of 20 spans seen", len(seen))
	// The table form runs too.
	r = otelctx(t, "threads", "--mode", "ebpf", "--duration", "50ms", strconv.Itoa(p.PID))
	if r.code != 0 || !strings.Contains(r.stdout, "SAMPLES") {
		t.Errorf("table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
