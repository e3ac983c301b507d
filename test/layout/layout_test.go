// SPDX-License-Identifier: Apache-2.0

package layout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/otelctx/otelctx/"

// layers, lowest first. A package belongs to the entry whose path is the
// longest prefix of its own; it may import packages of a lower layer and of
// its own entry, never one of a higher layer or of another entry of its
// layer: discovery, the thread readers and the catalog do not know each
// other (the watcher feeds the catalog from both).
var layers = [][]string{
	{"internal/utf8safe", "internal/version", "internal/hostinfo", "internal/linuxonly", "internal/processctxtel"},
	// Reading /proc and other processes' memory, what publishers write, and
	// a profiles message's dictionary: the formats are pure functions over
	// bytes and the dictionary over pdata, so none knows another.
	{"internal/proc", "internal/format", "internal/profiledict"},
	{"internal/publisher"}, // the data model both pipelines share
	{"internal/scan", "internal/threads", "internal/catalog"},
	{"internal/attribution", "internal/pdataconv", "internal/cputime", "internal/catalogview"},
	// The thread sources: the capture of internal/threads, judged by
	// internal/attribution, into the catalog; the watcher runs one.
	{"internal/threadsource"},
	// The running system, the join onto telemetry and the entity events:
	// none knows another (the components hand them the watcher's output).
	{"internal/watcher", "internal/enrich", "internal/entityevents"},
	{"extension", "receiver", "processor", "connector", "cmd"},
	{"internal/testutil"},
	{"test"},
}

// place is the layer and entry of a module-relative package path.
func place(pkg string) (layer int, entry string, ok bool) {
	for l, entries := range layers {
		for _, e := range entries {
			if (pkg == e || strings.HasPrefix(pkg, e+"/")) && len(e) > len(entry) {
				layer, entry, ok = l, e, true
			}
		}
	}
	return layer, entry, ok
}

// allowed reports whether from may import to (module-relative paths).
func allowed(from, to string) (bool, string) {
	fl, fe, ok := place(from)
	if !ok {
		return false, from + " is in no layer: add it to layers"
	}
	tl, te, ok := place(to)
	if !ok {
		return false, to + " is in no layer: add it to layers"
	}
	if fe == te || tl < fl {
		return true, ""
	}
	return false, from + " (" + fe + ") imports " + to + " (" + te + "), which is not below it"
}

func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not at %s: %v", root, err)
	}
	// Linux and another system: build tags choose other files (the
	// components' stubs) and so other arrows.
	for _, goos := range []string{"linux", "windows"} {
		pkgs, arrows := 0, 0
		for from, imports := range imports(t, root, goos) {
			pkgs++
			if _, _, ok := place(from); !ok && goos == "linux" {
				t.Errorf("%s is in no layer: add it to layers", from)
			}
			for _, to := range imports {
				arrows++
				if ok, why := allowed(from, to); !ok {
					t.Errorf("GOOS=%s: %s", goos, why)
				}
			}
		}
		// Elsewhere most packages are behind //go:build linux: fewer
		// packages have files, fewer arrows.
		minPkgs, minArrows := 30, 20
		if goos != "linux" {
			minPkgs, minArrows = 20, 5
		}
		if pkgs < minPkgs || arrows < minArrows {
			t.Fatalf("GOOS=%s: go list gave %d packages and %d imports between them: the listing is broken", goos, pkgs, arrows)
		}
	}
}

// imports lists, for every package of the module built for goos, the
// module's packages its non-test files import (a package's tests may use
// any other), module-relative.
func imports(t *testing.T, root, goos string) map[string][]string {
	t.Helper()
	// -e: a package with no file for goos is listed, with no imports.
	cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS="+goos)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list: %v: %s", goos, err, stderr.Bytes())
	}
	m := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		from := strings.TrimPrefix(fields[0], module)
		m[from] = nil
		for _, imp := range fields[1:] {
			if to, ours := strings.CutPrefix(imp, module); ours {
				m[from] = append(m[from], to)
			}
		}
	}
	return m
}

// TestAllowed: the rules themselves, on arrows that must pass and fail.
func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"internal/catalog", "internal/publisher", true},
		{"internal/threads/threadread", "internal/threads/ptrace", true},
		{"internal/format/ddotel", "internal/proc/remote", false},
		{"internal/format/ddotel", "internal/proc/pidns", false},
		{"internal/proc/pidns", "internal/format/ddotel", false},
		{"internal/scan/ddscan", "internal/format/ddotel", true},
		{"internal/scan/ddscan", "internal/proc/pagemap", true},
		{"internal/threads/schema/ddring/ddslots", "internal/proc/pidns", true},
		{"internal/threads/schema/ddring/ddslots", "internal/scan/ddscan", false},
		{"internal/threads/schema/ddring/ddslots", "internal/threads/threadread", true},
		{"internal/format/processctx", "internal/utf8safe", true},
		{"internal/testutil/ebpfwatch", "extension/processctxextension", true},
		{"receiver/processctxreceiver", "receiver/processctxreceiver/internal/metadata", true},
		{"internal/catalog", "internal/scan", false},
		{"internal/catalog", "internal/scan/envscan", false},
		{"internal/scan/envscan", "internal/catalog", false},
		{"internal/watcher", "internal/scan/envscan", true},
		{"internal/catalog", "internal/threads/sampler", false},
		{"internal/threads/threadread", "internal/catalog", false},
		{"internal/threads/sampler", "internal/scan", false},
		{"internal/scan", "internal/threads/ptrace", false},
		{"internal/publisher", "internal/scan", false},
		{"internal/watcher", "internal/testutil/testenv", false},
		{"receiver/processctxreceiver", "extension/processctxextension", false},
		{"internal/newthing", "internal/publisher", false},
		{"extension/processctxextension", "internal/linuxonly", true},
		{"internal/linuxonly", "internal/watcher", false},
		{"processor/ctxenrichprocessor", "internal/enrich", true},
		{"internal/enrich", "internal/catalog", true},
		{"internal/enrich", "internal/pdataconv", true},
		{"internal/enrich", "internal/watcher", false},
		{"internal/watcher", "internal/enrich", false},
		{"internal/enrich", "processor/ctxenrichprocessor", false},
		{"receiver/processctxreceiver", "internal/entityevents", true},
		{"internal/entityevents", "internal/watcher", false},
		{"internal/watcher", "internal/threadsource", true},
		{"internal/threadsource", "internal/catalog", true},
		{"internal/threadsource", "internal/threads/sampler", true},
		{"internal/threadsource", "internal/processctxtel", true},
		{"internal/threadsource", "internal/watcher", false},
		{"internal/threads/sampler", "internal/threadsource", false},
		{"internal/attribution", "internal/threadsource", false},
		{"internal/processctxtel", "internal/watcher", false},
		// The thread-context schemas: one package each, listed by the
		// registry; the readers ask it, never discovery or the sources.
		{"internal/threads/schema/registry", "internal/threads/schema/nodejs", true},
		{"internal/threads/schema/nodejs", "internal/format/nodectx", true},
		{"internal/threads/schema/ddring", "internal/publisher", true},
		{"internal/threads/threadread", "internal/threads/schema", true},
		{"internal/threadsource", "internal/threads/schema/registry", true},
		{"internal/threads/schema/ddring", "internal/scan/ddscan", false},
		{"internal/threads/schema/registry", "internal/threadsource", false},
		{"internal/scan", "internal/threads/schema/registry", false},
	} {
		if ok, why := allowed(c.from, c.to); ok != c.ok {
			t.Errorf("%s -> %s: allowed %v (%s), want %v", c.from, c.to, ok, why, c.ok)
		}
	}
}
