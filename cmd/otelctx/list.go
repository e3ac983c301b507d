// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/catalogview"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/envscan"
)

func init() {
	register(&command{
		name:    "list",
		summary: "list every process that publishes a process context or names itself in its environment",
		help: `Scans every process once and prints those publishing a valid process
context, and those that publish none but name a resource in their
environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, as the collector
reads them), sorted by PID: PID, EXECUTABLE, SERVICE (service.name),
INSTANCE (service.instance.id), SCHEMA (threadlocal.schema_version, - when
not published) and SOURCE (published or environment). Processes whose
context could not be read are not listed; a warning on stderr counts them
by reason (-v logs which).

--json prints a JSON array of the objects "otelctx dump --json" prints
(publishers only).

--from ENDPOINT reads nothing itself: it prints the running collector's
catalog, served at the process_ctx extension's catalog_endpoint, given as
that setting says it (unix:/PATH or HOST:PORT; http://HOST:PORT too) (what the agent holds, with a THREADS column:
threads with a history); --json then prints the view as served.`,
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print a JSON array")
			from := fs.String("from", "", "print the catalog a collector serves at `endpoint` (its catalog_endpoint: unix:/PATH or HOST:PORT)")
			return func(e *env, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected argument %q", args[0])
				}
				if *from != "" {
					return listFrom(e, *from, *asJSON)
				}
				s, err := e.newScanner()
				if err != nil {
					return err
				}
				defer s.Close()
				events, st, err := s.Scan()
				if err != nil {
					return err
				}
				var procs []*publisher.Process
				for _, ev := range events {
					if ev.Kind == publisher.Found {
						procs = append(procs, ev.Process)
					}
				}
				if !*asJSON {
					procs = append(procs, envNamed(e.proc, procs)...)
				}
				slices.SortFunc(procs, func(a, b *publisher.Process) int { return a.ID.PID - b.ID.PID })
				if *asJSON {
					out := make([]contextJSON, 0, len(procs))
					for _, p := range procs {
						out = append(out, newContextJSON(p))
					}
					err = writeJSON(e.stdout, out)
				} else {
					err = writeTable(e.stdout, procs)
				}
				warnFailures(e.stderr, st)
				return err
			}
		},
	})
}

func writeTable(w io.Writer, procs []*publisher.Process) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tEXECUTABLE\tSERVICE\tINSTANCE\tSCHEMA\tSOURCE")
	for _, p := range procs {
		res := p.Context.Resource.Attributes
		service, instance, source := scalar(res, "service.name"), scalar(res, "service.instance.id"), "published"
		if catalog.NamedByEnvironment(p) {
			source = "environment"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.ID.PID, orDash(p.ExecutableName),
			orDash(service), orDash(instance), orDash(p.Context.ThreadLocal.SchemaVersion), source)
	}
	return tw.Flush()
}

// envNamed returns the processes of procRoot, other than the publishers,
// whose environment names a resource, read as the collector reads them.
func envNamed(procRoot string, publishers []*publisher.Process) []*publisher.Process {
	src, err := envscan.New(procRoot)
	if err != nil {
		return nil
	}
	c := catalog.New()
	c.EnableEnvironment(src, 1<<20)
	var out []*publisher.Process
	for _, pid := range envscan.PIDs(procRoot) {
		if slices.ContainsFunc(publishers, func(p *publisher.Process) bool { return p.ID.PID == pid }) {
			continue
		}
		if p, how := c.ProcessFor(pid, 0, 0, catalog.Claims{}); how == catalog.Found {
			q := *p
			q.ExecutableName = envscan.ExecutableName(procRoot, pid)
			out = append(out, &q)
		}
	}
	return out
}

// scalar renders attribute key for a table cell: a string as is, other
// kinds as dump shows them, "" when absent.
func scalar(attrs []processctx.Attribute, key string) string {
	v, ok := processctx.Lookup(attrs, key)
	if !ok {
		return ""
	}
	if v.Kind == processctx.KindStr {
		return v.Str
	}
	return textValue(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return cleanText(s)
}

// warnFailures tells, on one stderr line, that some processes could not be
// read and are missing from the list. Processes that exited are not news.
func warnFailures(w io.Writer, st scan.Stats) {
	var parts []string
	total := 0
	for _, r := range scan.Reasons() {
		if n := st.Failures[r]; n > 0 && r != scan.ReasonProcessGone {
			parts = append(parts, fmt.Sprintf("%s: %d", r, n))
			total += n
		}
	}
	if total == 0 {
		return
	}
	hint := "otelctx -v list logs them"
	if st.Failures[scan.ReasonPermission] > 0 && os.Geteuid() != 0 {
		hint = "reading other users' processes needs root; " + hint
	}
	fmt.Fprintf(w, "otelctx: warning: %d read(s) failed and are not listed (%s); %s\n",
		total, strings.Join(parts, ", "), hint)
}

// listFrom prints the catalog a running collector serves.
func listFrom(e *env, from string, asJSON bool) error {
	v, err := catalogview.Fetch(from, 10*time.Second)
	if err != nil {
		return fmt.Errorf("reading the collector's catalog: %w", err)
	}
	if asJSON {
		return writeJSON(e.stdout, v)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tEXECUTABLE\tSERVICE\tINSTANCE\tSCHEMA\tTHREADS")
	for _, p := range v.Processes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\n", p.PID, orDash(filepath.Base(p.Executable)),
			orDash(viewString(p.Resource, "service.name")), orDash(viewString(p.Resource, "service.instance.id")),
			orDash(p.SchemaVersion), p.Threads)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "otelctx: the collector's catalog at %s: %d processes, %d exited kept joinable, %d threads with %d runs\n",
		from, len(v.Processes), v.Retained, v.Threads, v.Runs)
	return nil
}

// viewString renders a served attribute for a table cell.
func viewString(attrs map[string]any, key string) string {
	switch v := attrs[key].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}
