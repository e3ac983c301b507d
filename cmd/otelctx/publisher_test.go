// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// Tests against real C publishers (internal/testutil/testpub). Reading another
// process's memory needs root here: the CLI is not the publisher's parent.

// executable is the publisher binary as /proc/PID/exe names it.
func executable(t *testing.T, libc testpub.Libc) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(testpub.Build(t, libc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fullPublisher publishes resource attributes (an int one among them),
// extra attributes and thread-context reference data, and returns the object
// dump --json must print for it.
func fullPublisher(t *testing.T, libc testpub.Libc) (*testpub.Publisher, uint64, string) {
	t.Helper()
	pub := testpub.Start(t, libc)
	pub.Set("service.name", "checkout", "service.instance.id", "inst-"+strconv.Itoa(pub.PID),
		"note", `quote " and <html> & unicode é`)
	pub.Do("setint process.runtime.workers 8")
	pub.Do("setint big.positive 9007199254740993") // 2^53+1: not exact as a float64
	pub.Do("setint big.negative -9223372036854775808")
	pub.Do("extra deployment.region eu-west-1")
	pub.Do("extra host.role worker node")
	pub.Do("schema tlsdesc_v1_dev")
	pub.Do("keymap http.route,http.request.method,user.tier")
	_, stamp := pub.Publish()
	want := fmt.Sprintf(`{
		"pid": %d,
		"published_at_ns": %d,
		"resource": {
			"service.name": "checkout",
			"service.instance.id": "inst-%d",
			"note": "quote \" and <html> & unicode é",
			"process.runtime.workers": 8,
			"big.positive": 9007199254740993,
			"big.negative": -9223372036854775808
		},
		"attributes": {"deployment.region": "eu-west-1", "host.role": "worker node"},
		"threadlocal": {"schema_version": "tlsdesc_v1_dev", "attribute_key_map": ["http.route", "http.request.method", "user.tier"]},
		"executable": %s
	}`, pub.PID, stamp, pub.PID, jsonString(t, executable(t, libc)))
	return pub, stamp, want
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decodeExact decodes exactly one JSON value (numbers kept exact) and
// fails on anything after it.
func decodeExact(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, s)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", s)
	}
	return v
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// objectKeys returns the keys of the JSON object in s in the order printed.
func objectKeys(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func assertJSONEqual(t *testing.T, got, want string) {
	t.Helper()
	g, w := decodeExact(t, got), decodeExact(t, want)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("JSON differs\n got: %s\nwant: %s", compact(t, got), compact(t, want))
	}
}

func compact(t *testing.T, s string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		return s
	}
	return b.String()
}

func TestDumpJSON(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		t.Run("full", func(t *testing.T) {
			pub, _, want := fullPublisher(t, libc)
			pid := strconv.Itoa(pub.PID)
			r := mustSucceed(t, "dump", "--json", pid)
			assertJSONEqual(t, r.stdout, want)
			wantKeys := []string{"pid", "published_at_ns", "resource", "attributes", "threadlocal", "executable"}
			if keys := objectKeys(t, r.stdout); !reflect.DeepEqual(keys, wantKeys) {
				t.Errorf("keys %v, want %v in this order", keys, wantKeys)
			}
			// Flags may follow the PID, and the common flags go anywhere.
			for _, args := range [][]string{{"dump", pid, "--json"}, {"--proc", "/proc", "dump", "-json", pid}} {
				if again := mustSucceed(t, args...); again.stdout != r.stdout {
					t.Errorf("otelctx %v printed\n%s\nwant\n%s", args, again.stdout, r.stdout)
				}
			}
		})
		t.Run("no threadlocal", func(t *testing.T) {
			// Unpublished thread-local data is an object with empty fields,
			// never null; no extra attributes is {}.
			pub := testpub.Start(t, libc)
			pub.Set("service.name", "bare")
			_, stamp := pub.Publish()
			r := mustSucceed(t, "dump", "--json", strconv.Itoa(pub.PID))
			assertJSONEqual(t, r.stdout, fmt.Sprintf(`{"pid":%d,"published_at_ns":%d,
				"resource":{"service.name":"bare"},"attributes":{},
				"threadlocal":{"schema_version":"","attribute_key_map":[]},
				"executable":%s}`, pub.PID, stamp, jsonString(t, executable(t, libc))))
		})
		t.Run("updated", func(t *testing.T) {
			// A dump after an update shows the new stamp and attributes.
			pub := testpub.Start(t, libc)
			pub.Set("service.name", "v1")
			_, stamp1 := pub.Publish()
			pub.Set("service.name", "v2")
			_, stamp2 := pub.Publish()
			if stamp2 <= stamp1 {
				t.Fatalf("stamps %d then %d", stamp1, stamp2)
			}
			r := mustSucceed(t, "dump", "--json", strconv.Itoa(pub.PID))
			got := decodeExact(t, r.stdout).(map[string]any)
			if got["published_at_ns"] != json.Number(strconv.FormatUint(stamp2, 10)) ||
				got["resource"].(map[string]any)["service.name"] != "v2" {
				t.Errorf("dump after update: %s", compact(t, r.stdout))
			}
		})
	})
}

func TestDumpText(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		pub := testpub.Start(t, libc)
		pub.Set("service.name", "checkout", "zeta", "last", "alpha", "first")
		pub.Do("setint process.runtime.workers 8")
		pub.Do("extra deployment.region eu-west-1")
		pub.Do("schema tlsdesc_v1_dev")
		pub.Do("keymap http.route,http.request.method")
		addr, stamp := pub.Publish()
		out := mustSucceed(t, "dump", strconv.Itoa(pub.PID)).stdout
		for _, re := range []string{
			`(?m)^pid +` + strconv.Itoa(pub.PID) + `$`,
			`(?m)^executable +` + regexp.QuoteMeta(executable(t, libc)) + `$`,
			`(?m)^created +\d{4}-\d\d-\d\dT`,
			`(?m)^mapping +/memfd:OTEL_CTX( \(deleted\))? at ` + fmt.Sprintf("%#x", addr) + `$`,
			`(?m)^published_at_ns +` + strconv.FormatUint(stamp, 10) + `$`,
			// resource attributes sorted by key
			`(?s)resource attributes \(4\)\n  alpha +"first"\n  process.runtime.workers +8\n  service.name +"checkout"\n  zeta +"last"\n`,
			`(?s)\nattributes \(1\)\n  deployment.region +"eu-west-1"\n`,
			`(?s)\nthreadlocal\n  schema_version +"tlsdesc_v1_dev"\n  attribute_key_map +2 keys\n +\[0\] +"http.route"\n +\[1\] +"http.request.method"\n`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("dump output does not match %s:\n%s", re, out)
			}
		}
		if strings.Contains(out, "note:") {
			t.Errorf("unexpected note:\n%s", out)
		}
	})
}

// listRows parses the list table into its cells by PID, checking the
// header, the column alignment and the PID order. Cells are cut at the
// header's column offsets (in runes, as tabwriter pads): other processes on
// the host may publish names with spaces.
func listRows(t *testing.T, out string) map[int][]string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	header := strings.Fields(lines[0])
	if want := []string{"PID", "EXECUTABLE", "SERVICE", "INSTANCE", "SCHEMA", "SOURCE"}; !reflect.DeepEqual(header, want) {
		t.Fatalf("header %q, want %q", lines[0], want)
	}
	var starts []int
	for _, h := range header {
		starts = append(starts, strings.Index(lines[0], h)) // ASCII: bytes = runes
	}
	rows := map[int][]string{}
	last := 0
	for _, l := range lines[1:] {
		r := []rune(l)
		cells := make([]string, len(starts))
		for i, s := range starts {
			if len(r) <= s || r[s] == ' ' || (i > 0 && r[s-1] != ' ') {
				t.Fatalf("row %q: column %s not aligned with the header", l, header[i])
			}
			end := len(r)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			cells[i] = strings.TrimRight(string(r[s:end]), " ")
		}
		pid, err := strconv.Atoi(cells[0])
		if err != nil || pid <= last {
			t.Fatalf("row %q: PID not ascending after %d", l, last)
		}
		last = pid
		rows[pid] = cells
	}
	return rows
}

func TestList(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		full, _, wantFull := fullPublisher(t, libc)
		child, err := strconv.Atoi(full.Do("fork")[0]) // inherits no context (MADV_DONTFORK)
		if err != nil {
			t.Fatal(err)
		}
		bare := testpub.Start(t, libc) // publishes an empty resource
		_, bareStamp := bare.Publish()
		silent := testpub.Start(t, libc) // a publisher process that never published
		silent.Set("service.name", "silent")
		exe := filepath.Base(executable(t, libc))

		t.Run("table", func(t *testing.T) {
			rows := listRows(t, mustSucceed(t, "list").stdout)
			if got, want := rows[full.PID], []string{strconv.Itoa(full.PID), exe, "checkout", "inst-" + strconv.Itoa(full.PID), "tlsdesc_v1_dev", "published"}; !reflect.DeepEqual(got, want) {
				t.Errorf("publisher row %q, want %q", got, want)
			}
			if got, want := rows[bare.PID], []string{strconv.Itoa(bare.PID), exe, "-", "-", "-", "published"}; !reflect.DeepEqual(got, want) {
				t.Errorf("bare publisher row %q, want %q", got, want)
			}
			for name, pid := range map[string]int{"forked child": child, "non-publisher": silent.PID} {
				if row, ok := rows[pid]; ok {
					t.Errorf("%s %d listed: %q", name, pid, row)
				}
			}
		})
		t.Run("json", func(t *testing.T) {
			out := mustSucceed(t, "list", "--json").stdout
			var all []json.RawMessage
			if err := json.Unmarshal([]byte(out), &all); err != nil {
				t.Fatalf("list --json: %v\n%s", err, out)
			}
			byPID := map[int]string{}
			last := 0
			for _, raw := range all {
				var o struct{ PID int }
				if err := json.Unmarshal(raw, &o); err != nil || o.PID <= last {
					t.Fatalf("element %s: PID not ascending after %d (%v)", raw, last, err)
				}
				last = o.PID
				byPID[o.PID] = string(raw)
			}
			if got, ok := byPID[full.PID]; !ok {
				t.Errorf("publisher %d missing from %s", full.PID, out)
			} else {
				assertJSONEqual(t, got, wantFull)
				// The same object as dump --json prints.
				assertJSONEqual(t, got, mustSucceed(t, "dump", "--json", strconv.Itoa(full.PID)).stdout)
			}
			if got, ok := byPID[bare.PID]; !ok {
				t.Errorf("bare publisher %d missing from %s", bare.PID, out)
			} else {
				assertJSONEqual(t, got, fmt.Sprintf(`{"pid":%d,"published_at_ns":%d,"resource":{},"attributes":{},
					"threadlocal":{"schema_version":"","attribute_key_map":[]},"executable":%s}`,
					bare.PID, bareStamp, jsonString(t, executable(t, libc))))
			}
			for _, pid := range []int{child, silent.PID} {
				if _, ok := byPID[pid]; ok {
					t.Errorf("pid %d is no publisher but listed", pid)
				}
			}
		})
	})
}

// TestListEmpty runs list against a procfs root that lists no process: the
// header (or []) alone, exit 0.
func TestListEmpty(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	// scan.New reads the boot time from <root>/stat.
	if err := copyFile("/proc/stat", filepath.Join(root, "stat")); err != nil {
		t.Fatal(err)
	}
	r := mustSucceed(t, "list", "--proc", root)
	if want := "PID  EXECUTABLE  SERVICE  INSTANCE  SCHEMA  SOURCE\n"; r.stdout != want {
		t.Errorf("list: %q, want %q", r.stdout, want)
	}
	r = mustSucceed(t, "list", "--json", "--proc", root)
	if r.stdout != "[]\n" {
		t.Errorf("list --json: %q, want %q", r.stdout, "[]\n")
	}
}

func TestDumpNonPublisher(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		silent := testpub.Start(t, libc)
		silent.Set("service.name", "silent") // set but never published
		pub := testpub.Start(t, libc)
		pub.Publish()
		child, err := strconv.Atoi(pub.Do("fork")[0])
		if err != nil {
			t.Fatal(err)
		}
		dropped := testpub.Start(t, libc)
		dropped.Publish()
		dropped.Do("drop") // unpublished again
		for name, pid := range map[string]int{"never published": silent.PID, "forked child": child, "dropped": dropped.PID} {
			for _, args := range [][]string{{"dump", strconv.Itoa(pid)}, {"dump", "--json", strconv.Itoa(pid)}} {
				got := failure(t, args...)
				if want := fmt.Sprintf("otelctx: pid %d: no process context", pid); got != want {
					t.Errorf("%s: otelctx %v: stderr %q, want %q", name, args, got, want)
				}
			}
		}
	})
}

func TestDumpGarbage(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		pub := testpub.Start(t, libc)
		pub.Set("service.name", "soon-garbage")
		pub.Publish()
		pub.Do("garbage 64")
		pid := strconv.Itoa(pub.PID)
		for _, args := range [][]string{{"dump", pid}, {"dump", "--json", pid}} {
			got := failure(t, args...)
			want := "otelctx: pid " + pid + ": process context invalid: malformed_payload (malformed process context payload"
			if !strings.HasPrefix(got, want) {
				t.Errorf("otelctx %v: stderr %q, want prefix %q", args, got, want)
			}
		}
		// list leaves it out and says why on stderr.
		r := mustSucceed(t, "list")
		if _, ok := listRows(t, r.stdout)[pub.PID]; ok {
			t.Errorf("garbage publisher listed:\n%s", r.stdout)
		}
		if !regexp.MustCompile(`(?m)^otelctx: warning: .*malformed_payload: [1-9]`).MatchString(r.stderr) {
			t.Errorf("list stderr does not report the malformed payload:\n%s", r.stderr)
		}
		// -v shows the reader's debug logs, then the same one-line reason.
		r = otelctx(t, "-v", "dump", pid)
		if r.code != 1 || !strings.Contains(r.stderr, "DEBUG") || !strings.Contains(r.stderr, "process context payload rejected") {
			t.Errorf("-v dump: exit %d, stderr:\n%s", r.code, r.stderr)
		}
		if !strings.HasSuffix(r.stderr, "\n"+failure(t, "dump", pid)+"\n") {
			t.Errorf("-v dump does not end with the error line:\n%s", r.stderr)
		}
	})
}

func TestMaxPayloadSize(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		pub := testpub.Start(t, libc)
		pub.Set("service.name", "sized")
		pub.Publish()
		pid := strconv.Itoa(pub.PID)
		got := failure(t, "--max-payload-size", "8", "dump", pid)
		if want := "otelctx: pid " + pid + ": process context invalid: payload_size ("; !strings.HasPrefix(got, want) {
			t.Errorf("stderr %q, want prefix %q", got, want)
		}
		if _, ok := listRows(t, mustSucceed(t, "list", "--max-payload-size", "8").stdout)[pub.PID]; ok {
			t.Errorf("list --max-payload-size 8 lists a larger context")
		}
		mustSucceed(t, "dump", "--max-payload-size", "4096", pid)
	})
}

// TestListEnvironment: a process that publishes nothing but names itself in
// its environment is listed with SOURCE environment; one that sets neither
// variable is not.
func TestListEnvironment(t *testing.T) {
	t.Parallel()
	testenv.RequireRoot(t)
	start := func(env ...string) int { return testenv.Sleeper(t, env...).Process.Pid }
	named := start("OTEL_SERVICE_NAME=listed-env", "OTEL_RESOURCE_ATTRIBUTES=service.instance.id=i-1")
	bare := start("PATH=/bin")
	rows := listRows(t, mustSucceed(t, "list").stdout)
	if got, want := rows[named], []string{strconv.Itoa(named), "sleep", "listed-env", "i-1", "-", "environment"}; !reflect.DeepEqual(got, want) {
		t.Errorf("environment-named row %q, want %q", got, want)
	}
	if row, ok := rows[bare]; ok {
		t.Errorf("process without the variables listed: %q", row)
	}
}
