package main

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testenv"
	"github.com/otelctx/otelctx/internal/testpub"
	"github.com/otelctx/otelctx/internal/threadpub"
)

// The thread publishers are children of the test process, not of the CLI,
// which is what otelctx threads stops: as for a user, the tracer is not the
// target's parent.

func hexBytes(s string) (b [16]byte) {
	hex.Decode(b[:], []byte(s))
	return b
}

func spanBytes(s string) (b [8]byte) {
	hex.Decode(b[:], []byte(s))
	return b
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

			r := otelctx(t, "threads", "--json", strconv.Itoa(p.PID))
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			var got []map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("%v\n%s", err, r.stdout)
			}
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
			check(a.TID, `{"attributes":{"http.request.method":"GET","http.route":"/api/v1/users"},"span_id":"b7ad6b7169203331","tid":`+
				strconv.Itoa(a.TID)+`,"trace_flags":1,"trace_id":"0af7651916cd43dd8448eb211c80319c"}`)
			check(b.TID, `{"attributes":{"user.id":"alice"},"span_id":"00f067aa0ba902b7","tid":`+
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
		{"ebpf", []string{"threads", "--mode", "ebpf", strconv.Itoa(noContext.PID)}, 2, "--mode ebpf is not available yet"},
		{"bad mode", []string{"threads", "--mode", "magic", "1"}, 2, `--mode must be ptrace, got "magic"`},
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
