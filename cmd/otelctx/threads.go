// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// threadsHelp is the threads command's --help text.
const threadsHelp = `Takes one snapshot of the thread contexts of PID: every thread is stopped
in turn with ptrace (for microseconds), the record its otel_thread_ctx_v1
TLS variable points at is read, and the thread is let go. This source needs
a process context whose threadlocal.schema_version is a TLS schema
(tlsdesc_v1_dev or tls_v1); attribute key indexes are named through its
threadlocal.attribute_key_map. For nodejs_v1_dev (Node.js with dd-trace,
DD_TRACE_OTEL_CTX_ENABLED=true) the variable is otel_thread_ctx_nodejs_v1
and the record is the one of the thread's current async context, found
through its AsyncContextFrame; a walk that does not check out shows a
"node: ..." reason.

Whatever the executable, PID is also searched for the Datadog Java
profiler's DD_OTEL_CTX ring buffer (ctxstorage=otel): its slot of each
thread (tid % capacity) is read twice without stopping the thread, and
trusted only if no write was in progress or happened in between and no
other live thread shares the slot. A thread with an OTEP 4947 record shows
that one. Exits 1 with a one-line reason when neither source is there: no
context, otel_thread_ctx_v1 not exported, or a schema this reader does not
handle (go_pprof_labels_v1), and no DD_OTEL_CTX buffer (or a refused one).

--json prints one array, a thread per element:
  {"tid":N,"source":"otep4947","trace_id":"32 hex","span_id":"16 hex",
   "trace_flags":N,"attributes":{"name":"value"}}
(source dd_otel_ctx: trace_flags 0, no attributes) or, for a thread
without a (valid) record,
  {"tid":N,"source":"otep4947","record":null,"reason":"null pointer"}
(reasons: null pointer, not allocated, not valid, already traced, exited,
timeout, slot error, read error, stop error; for dd_otel_ctx: empty slot,
write in progress, torn, collision, stale owner, not in buffer; "error"
adds details).

--mode ebpf --duration D (default 1s) samples instead of stopping: the eBPF
sampler (root, BPF) reads the OTEP 4947 record and the DD_OTEL_CTX slot of
PID's threads from inside the kernel at --frequency Hz (default 97) on every
CPU for D, while they run. A DD slot is trusted as in the snapshot: no
other thread listed (/proc/PID/task) just before or just after the sample
shares it (else: collision), and it does not still hold the value a
previous owner of the slot left (else: stale owner); a slot the kernel
could not read is "not resident", one of a process that could not be
listed after the sample "unlisted", an OTEP 4947 record too short to
parse "parse error". It prints, per
thread in time order, one entry per run of identical samples (a thread
with both sources: the OTEP 4947 record wins, as above): the fields above
plus "time_unix_nano" (first sample of the run), "last_unix_nano" (last
sample) and "samples"; a thread that did not run during D is absent.
--mode ebpf exits 1 with the kernel's reason when the sampler cannot load.

-v also logs, on stderr, where otel_thread_ctx_v1 was found and from which
symbol table ("symbol_table": dynsym, exported as OTEP 4947 requires, or
symtab: an executable that does not export it, such as a plain -static
build, read from its own .symtab).`

// threadsFlags are the threads command's options.
type threadsFlags struct {
	asJSON   *bool
	mode     *string
	readCap  *int
	duration *time.Duration
	freq     *int
}

func init() {
	register(&command{
		name:    "threads",
		args:    "PID",
		summary: "print the thread contexts (OTEP 4947, DD_OTEL_CTX) of one process's threads",
		help:    threadsHelp,
		setup: func(fs *flag.FlagSet) runFunc {
			f := threadsFlags{
				asJSON:   fs.Bool("json", false, "print one JSON array"),
				mode:     fs.String("mode", "ptrace", "how threads are read: `ptrace` (one snapshot) or ebpf (sampling for --duration)"),
				readCap:  fs.Int("read-cap", threadctx.DefaultReadCap, "read at most this many `bytes` of a record"),
				duration: fs.Duration("duration", time.Second, "--mode ebpf: sample for this `long`"),
				freq:     fs.Int("frequency", sampler.DefaultFrequencyHz, "--mode ebpf: samples per second per CPU (`Hz`)"),
			}
			return func(e *env, args []string) error { return runThreads(e, f, args) }
		},
	})
}

// runThreads checks the options and prints the snapshot or the sampled runs.
func runThreads(e *env, f threadsFlags, args []string) error {
	asJSON, mode, readCap, duration, freq := f.asJSON, f.mode, f.readCap, f.duration, f.freq
	maxCap := threadctx.HeaderSize + 65535
	switch *mode {
	case "ptrace":
	case "ebpf":
		maxCap = sampler.MaxReadCap
		if *duration <= 0 || *duration > time.Hour {
			return usageErrorf("--duration must be in (0, 1h], got %v", *duration)
		}
		if *freq < 1 || *freq > 10000 {
			return usageErrorf("--frequency must be in [1, 10000], got %d", *freq)
		}
	default:
		return usageErrorf("--mode must be ptrace or ebpf, got %q", *mode)
	}
	if *readCap < threadctx.HeaderSize || *readCap > maxCap {
		return usageErrorf("--read-cap must be between %d and %d", threadctx.HeaderSize, maxCap)
	}
	if len(args) != 1 {
		return usageErrorf("expected one PID, got %d arguments", len(args))
	}
	pid, err := parsePID(args[0])
	if err != nil {
		return err
	}
	if *mode == "ebpf" {
		runs, err := e.sampleThreads(pid, *readCap, *freq, *duration)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(e.stdout, newRunsJSON(runs))
		}
		return writeRunsText(e.stdout, runs)
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

// locateThreadContext reads pid's process context and finds its thread
// variable for the schema it announces (the registry's Locate, as the
// collector's thread sources do): what both modes need before touching a
// thread.
func (e *env) locateThreadContext(pid int) (km keyMap, v schema.Variable, err error) {
	s, err := e.newScanner()
	if err != nil {
		return km, v, err
	}
	defer s.Close()
	p, err := s.ReadPID(pid)
	if err != nil {
		if errors.Is(err, scan.ErrNoContext) {
			return km, v, notPublished{e.pidError(pid, err)}
		}
		return km, v, e.pidError(pid, err)
	}
	tl := p.Context.ThreadLocal
	km = keyMap{keys: tl.AttributeKeyMap, refresh: threadread.KeyMapRefresher(e.proc, p, e.limits())}
	v, err = registry.Locate(tl, func() (*tlsvar.Location, error) {
		loc, err := tlsvar.Resolve(e.proc, pid)
		if err == nil {
			logLocation(e.log, pid, loc)
		}
		return loc, err
	})
	if err != nil {
		return km, v, fmt.Errorf("pid %d: %w%s", pid, err, nodeHint(p, err))
	}
	return km, v, nil
}

// keyMap is a process's threadlocal.attribute_key_map as first read, and
// its re-read (threadread.KeyMapRefresher, as the collector's) for a record
// that uses an index the first read did not have.
type keyMap struct {
	keys    []string
	refresh func() ([]string, error) // nil: the context was not read
}

// nodeHint says why a Node.js process (telemetry.sdk.language nodejs)
// declares no thread-context schema.
func nodeHint(p *publisher.Process, err error) string {
	lang, _ := processctx.Lookup(p.Context.Resource.Attributes, "telemetry.sdk.language")
	if !errors.Is(err, schema.ErrNoSchema) || lang.AsString() != "nodejs" {
		return ""
	}
	return "; dd-trace publishes Node.js thread contexts (nodejs_v1_dev) with DD_TRACE_OTEL_CTX_ENABLED=true on Node >= 22 with AsyncContextFrame (the default from Node 24; --experimental-async-context-frame on Node 22)"
}

// logLocation says (-v) where the variable was found, and from which
// symbol table: a writer whose variable is only in .symtab does not follow
// OTEP 4947 (other readers will not find it), which a user should see.
func logLocation(log *zap.Logger, pid int, loc *tlsvar.Location) {
	msg := loc.Symbol + " located (exported, in .dynsym)"
	if loc.SymbolTable == tlsvar.SymbolTableSymtab {
		msg = loc.Symbol + " located in the executable's .symtab only: not exported in .dynsym as OTEP 4947 requires"
	}
	log.Debug(msg, zap.Int("pid", pid), zap.String("symbol_table", loc.SymbolTable), zap.String("module", loc.Module),
		zap.Stringer("model", loc.Model), zap.Stringer("placement", loc.Placement), zap.Stringer("libc", loc.Libc))
}

// snapshotThreads reads both sources of pid's thread contexts: the OTEP
// 4947 records (snapshotOTEP) and a buffer's slots (readSlots), and
// merges them per thread (an OTEP 4947 record wins). It fails when neither
// source could be read, or when the PID changed hands during the reads.
func (e *env) snapshotThreads(pid, readCap int) ([]threadread.Thread, error) {
	// The identity before the reads; a failure to read it is reported
	// after them, where a source's own reason says more.
	ticks, ticksErr := procstat.StartTicks(e.proc, pid)
	id := publisher.ProcessID{PID: pid, StartTicks: ticks}
	otep, otepErr := e.snapshotOTEP(pid, readCap)
	dd, buf, ddErr := e.readSlots(id)
	if err := e.sourcesRead(pid, otepErr, buf, ddErr); err != nil {
		return nil, err
	}
	if ticksErr != nil {
		return nil, e.pidError(pid, ticksErr)
	}
	res, err := attribution.FromSnapshot(attribution.Snapshot{ID: id, At: time.Now(), OTEP: otep, OTEPFailed: otepErr != nil,
		Slots: dd, ProcRoot: e.proc})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	threads := res.Threads
	sort.SliceStable(threads, func(i, j int) bool { return threads[i].TID < threads[j].TID })
	return threads, nil
}

// sourcesRead judges what reading (or locating) pid's two sources gave
// (buf: the buffer found, nil: none): an error when neither can be read
// (the OTEP 4947 reason, then the buffer's); otherwise a line on stderr
// for a source that failed for another reason than being absent, and nil.
func (e *env) sourcesRead(pid int, otepErr error, buf *publisher.Buffer, ddErr error) error {
	if otepErr != nil && ddErr != nil {
		return fmt.Errorf("%w (%s)", otepErr, bufferNote(ddErr))
	}
	if otepErr != nil && !errors.Is(otepErr, errNotPublished) && !errors.Is(otepErr, threadread.ErrNoSchema) {
		// A process that meant to publish OTEP 4947 records and could not
		// be read that way: say so, then show the buffer's records.
		fmt.Fprintf(e.stderr, "otelctx: %s; showing the %s slots\n", oneLine(otepErr.Error()), bufferName(buf.Schema))
	}
	if ddErr != nil && !bufferAbsent(ddErr) {
		// A refused buffer (or a failed read) next to readable OTEP 4947
		// records: worth a line, not a failure.
		fmt.Fprintf(e.stderr, "otelctx: pid %d: %s\n", pid, bufferNote(ddErr))
	}
	return nil
}

// snapshotOTEP reads pid's process context (schema, key map), resolves
// otel_thread_ctx_v1 and takes one ptrace snapshot.
func (e *env) snapshotOTEP(pid, readCap int) ([]threadread.Thread, error) {
	km, v, err := e.locateThreadContext(pid)
	if err != nil {
		return nil, err
	}
	threads, _, err := threadread.Snapshot(pid, v, threadread.Options{
		ReadCap:       readCap,
		KeyMap:        km.keys,
		ProcRoot:      e.proc,
		RefreshKeyMap: km.refresh,
	})
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return threads, nil
}

// threadNoRecordJSON keeps "record": null in the output (omitempty would
// drop a nil pointer).
type threadNoRecordJSON struct {
	TID    int     `json:"tid"`
	Source string  `json:"source,omitempty"`
	Record *string `json:"record"`
	Reason string  `json:"reason"`
	Error  string  `json:"error,omitempty"`
}

func newThreadsJSON(threads []threadread.Thread) []any {
	out := make([]any, 0, len(threads))
	for _, th := range threads {
		if th.Record == nil {
			j := threadNoRecordJSON{TID: th.TID, Source: th.Source, Reason: th.Reason}
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
			Source     string            `json:"source,omitempty"`
			TraceID    string            `json:"trace_id"`
			SpanID     string            `json:"span_id"`
			TraceFlags uint8             `json:"trace_flags"`
			Attributes map[string]string `json:"attributes"`
			Truncated  bool              `json:"truncated,omitempty"`
		}{th.TID, th.Source, th.Record.TraceID.String(), th.Record.SpanID.String(), flags, attrs, th.Record.Truncated})
	}
	return out
}

// writeThreadsText prints a table, a thread per row.
func writeThreadsText(w io.Writer, threads []threadread.Thread) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TID\tSOURCE\tTRACE ID\tSPAN ID\tFLAGS\tATTRIBUTES")
	for _, th := range threads {
		if th.Record == nil {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t(no record: %s)\n", th.TID, orDash(th.Source), th.Reason)
			continue
		}
		attrs := attributesText(th.Attributes)
		if th.Record.Truncated {
			attrs += " (truncated)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%02x\t%s\n", th.TID, orDash(th.Source), th.Record.TraceID, th.Record.SpanID, th.Record.TraceFlags, orDash(attrs))
	}
	return tw.Flush()
}

// attributesText renders a thread's attributes as "k=v k=v", sorted by
// key, with control characters escaped (they come from the target process).
func attributesText(attrs map[string]string) string {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%s", cleanText(k), cleanText(attrs[k]))
	}
	return b.String()
}
