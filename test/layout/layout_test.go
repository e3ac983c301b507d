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
	{"internal/utf8safe", "internal/version", "internal/hostinfo", "internal/proc"},
	{"internal/format"},    // what publishers write
	{"internal/publisher"}, // the data model both pipelines share
	{"internal/discovery", "internal/threads", "internal/catalog"},
	{"internal/attribution", "internal/pdataconv"},
	{"internal/watcher"},
	{"extension", "receiver", "processor", "cmd"},
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
	// Imports of the non-test files: a package's tests may use any other.
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.Bytes())
	}
	pkgs, arrows := 0, 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		from := strings.TrimPrefix(fields[0], module)
		pkgs++
		for _, imp := range fields[1:] {
			to, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			arrows++
			if ok, why := allowed(from, to); !ok {
				t.Error(why)
			}
		}
	}
	if pkgs < 30 || arrows < 50 {
		t.Fatalf("go list gave %d packages and %d imports between them: the listing is broken", pkgs, arrows)
	}
}

// TestAllowed: the rules themselves, on arrows that must pass and fail.
func TestAllowed(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"internal/catalog", "internal/publisher", true},
		{"internal/threads/threadread", "internal/threads/ptrace", true},
		{"internal/format/ddotel", "internal/proc/remote", true},
		{"internal/testutil/ebpfwatch", "extension/processctxextension", true},
		{"receiver/processctxreceiver", "receiver/processctxreceiver/internal/metadata", true},
		{"internal/catalog", "internal/discovery", false},
		{"internal/catalog", "internal/threads/sampler", false},
		{"internal/threads/threadread", "internal/catalog", false},
		{"internal/threads/sampler", "internal/discovery", false},
		{"internal/discovery", "internal/threads/ptrace", false},
		{"internal/publisher", "internal/discovery", false},
		{"internal/watcher", "internal/testutil/testenv", false},
		{"receiver/processctxreceiver", "extension/processctxextension", false},
		{"internal/newthing", "internal/publisher", false},
	} {
		if ok, why := allowed(c.from, c.to); ok != c.ok {
			t.Errorf("%s -> %s: allowed %v (%s), want %v", c.from, c.to, ok, why, c.ok)
		}
	}
}
