package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/otelctx/otelctx/internal/scan/threadctx"
	"github.com/otelctx/otelctx/internal/scan/threadread"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
)

func init() {
	register(&command{
		name:    "threads",
		args:    "PID",
		summary: "print the thread contexts (OTEP 4947) of one process's threads",
		help: `Takes one snapshot of the thread contexts of PID: every thread is stopped
in turn with ptrace (for microseconds), the record its otel_thread_ctx_v1
TLS variable points at is read, and the thread is let go. The process must
publish a process context whose threadlocal.schema_version is a TLS schema
(tlsdesc_v1_dev or tls_v1); attribute key indexes are named through its
threadlocal.attribute_key_map. Exits 1 with a one-line reason when the
process has no context, does not export otel_thread_ctx_v1, or uses a schema
this reader does not handle (go_pprof_labels_v1).

--json prints one array, a thread per element:
  {"tid":N,"trace_id":"32 hex","span_id":"16 hex","trace_flags":N,
   "attributes":{"name":"value"}}
or, for a thread without a (valid) record,
  {"tid":N,"record":null,"reason":"null pointer"}
(reasons: null pointer, not allocated, not valid, already traced, exited,
timeout, slot error, read error, stop error; "error" adds details).

--mode ptrace is the only mode for now; --mode ebpf exits 2 (not available yet).`,
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print one JSON array")
			mode := fs.String("mode", "ptrace", "how threads are read: `ptrace` (ebpf: not available yet)")
			readCap := fs.Int("read-cap", threadctx.DefaultReadCap, "read at most this many `bytes` of a record")
			return func(e *env, args []string) error {
				switch *mode {
				case "ptrace":
				case "ebpf", "auto":
					return usageErrorf("--mode %s is not available yet (the eBPF sampler is planned); use --mode ptrace", *mode)
				default:
					return usageErrorf("--mode must be ptrace, got %q", *mode)
				}
				if *readCap < threadctx.HeaderSize || *readCap > threadctx.HeaderSize+65535 {
					return usageErrorf("--read-cap must be between %d and %d", threadctx.HeaderSize, threadctx.HeaderSize+65535)
				}
				if len(args) != 1 {
					return usageErrorf("expected one PID, got %d arguments", len(args))
				}
				pid, err := parsePID(args[0])
				if err != nil {
					return err
				}
				threads, err := e.snapshotThreads(pid, *readCap)
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(e.stdout, newThreadsJSON(threads))
				}
				return writeThreadsText(e.stdout, threads)
			}
		},
	})
}

// snapshotThreads reads pid's process context (schema, key map), resolves
// otel_thread_ctx_v1 and takes one snapshot.
func (e *env) snapshotThreads(pid, readCap int) ([]threadread.Thread, error) {
	s, err := e.newScanner()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	p, err := s.ReadPID(pid)
	if err != nil {
		return nil, e.pidError(pid, err)
	}
	tl := p.Context.ThreadLocal
	if err := threadread.CheckSchema(tl.SchemaVersion); err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	loc, err := tlsvar.Resolve(e.proc, pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: cannot locate %s: %w", pid, tlsvar.SymbolName, err)
	}
	threads, _, err := threadread.Snapshot(pid, loc, threadread.Options{
		ReadCap:  readCap,
		KeyMap:   tl.AttributeKeyMap,
		ProcRoot: e.proc,
		RefreshKeyMap: func() ([]string, error) {
			np, err := s.ReadPID(pid)
			if err != nil {
				return nil, err
			}
			return np.Context.ThreadLocal.AttributeKeyMap, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	sort.Slice(threads, func(i, j int) bool { return threads[i].TID < threads[j].TID })
	return threads, nil
}

// threadNoRecordJSON keeps "record": null in the output (omitempty would
// drop a nil pointer).
type threadNoRecordJSON struct {
	TID    int     `json:"tid"`
	Record *string `json:"record"`
	Reason string  `json:"reason"`
	Error  string  `json:"error,omitempty"`
}

func newThreadsJSON(threads []threadread.Thread) []any {
	out := make([]any, 0, len(threads))
	for _, th := range threads {
		if th.Record == nil {
			j := threadNoRecordJSON{TID: th.TID, Reason: th.Reason}
			if th.Err != nil {
				j.Error = oneLine(th.Err.Error())
			}
			out = append(out, j)
			continue
		}
		flags := th.Record.TraceFlags
		attrs := th.Attributes
		if attrs == nil {
			attrs = map[string]string{}
		}
		out = append(out, struct {
			TID        int               `json:"tid"`
			TraceID    string            `json:"trace_id"`
			SpanID     string            `json:"span_id"`
			TraceFlags uint8             `json:"trace_flags"`
			Attributes map[string]string `json:"attributes"`
			Truncated  bool              `json:"truncated,omitempty"`
		}{th.TID, th.Record.TraceID.String(), th.Record.SpanID.String(), flags, attrs, th.Record.Truncated})
	}
	return out
}

// writeThreadsText prints a table, a thread per row.
func writeThreadsText(w io.Writer, threads []threadread.Thread) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TID\tTRACE ID\tSPAN ID\tFLAGS\tATTRIBUTES")
	for _, th := range threads {
		if th.Record == nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t(no record: %s)\n", th.TID, th.Reason)
			continue
		}
		keys := make([]string, 0, len(th.Attributes))
		for k := range th.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s=%s", cleanText(k), cleanText(th.Attributes[k]))
		}
		if th.Record.Truncated {
			b.WriteString(" (truncated)")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%02x\t%s\n", th.TID, th.Record.TraceID, th.Record.SpanID, th.Record.TraceFlags, orDash(b.String()))
	}
	return tw.Flush()
}
