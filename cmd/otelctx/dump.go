// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"flag"
	"time"
)

func init() {
	register(&command{
		name:    "dump",
		args:    "PID",
		summary: "print one process's context",
		help: `Reads the process context of PID now and prints it: resource attributes,
extra attributes, thread-context reference data (threadlocal) and entity
refs. Exits 1 with a one-line reason when PID has no valid process context.

--json prints one object:
  {"pid":N,"published_at_ns":N,"resource":{...},"attributes":{...},
   "threadlocal":{"schema_version":"...","attribute_key_map":[...]},
   "executable":"...", "dropped_attributes_count":N, "entity_refs":[...]}
(the last three only when known / non-zero / present). Values map to JSON:
ints as integers, bytes as base64, arrays as arrays, kvlists as objects.`,
		setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, "print one JSON object")
			return func(e *env, args []string) error {
				if len(args) != 1 {
					return usageErrorf("expected one PID, got %d arguments", len(args))
				}
				pid, err := parsePID(args[0])
				if err != nil {
					return err
				}
				s, err := e.newScanner()
				if err != nil {
					return err
				}
				defer s.Close()
				p, err := s.ReadPID(pid)
				if err != nil {
					return e.pidError(pid, err)
				}
				if *asJSON {
					return writeJSON(e.stdout, newContextJSON(p))
				}
				return writeText(e.stdout, p, time.Now())
			}
		},
	})
}
