// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// elfMachines are the ELF machines of make image's architectures.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImageContextArchitectures: make image-context, given the distribution
// an arm64 build host's make build makes (IMAGE_BIN of machine aarch64),
// puts it in the arm64 slot only and cross-compiles the amd64 one; every
// binary of the context (distribution and CLI, per platform) is a static
// executable of its platform's machine. (It used to copy IMAGE_BIN into
// the amd64 slot whatever its machine.)
func TestImageContextArchitectures(t *testing.T) {
	mk := testenv.RequireTool(t, "make")
	testenv.RequireTool(t, "file")
	testenv.DistBinary(t)
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "_build", "dist", "main.go")); err != nil {
		testenv.Missing(t, "no generated distribution sources in _build/dist (make build)")
	}
	// A static arm64 executable standing in for an arm64 host's make build.
	stub := filepath.Join(t.TempDir(), "otelcol-otelctx")
	build := testenv.GoBuild(root, "-o", stub, "./cmd/otelctx")
	build.Env = append(build.Env, "GOOS=linux", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build (arm64 stand-in): %v\n%s", err, out)
	}
	cmd := exec.Command(mk, "--no-print-directory", "image-context", "IMAGE_BIN="+stub)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image-context: %v\n%s", err, out)
	}
	want, err := os.ReadFile(stub)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range imagePlatforms(t) {
		arch := strings.TrimPrefix(p, "linux/")
		m, ok := elfMachines[arch]
		if !ok {
			t.Errorf("platform %s: no ELF machine known to this test", p)
			continue
		}
		for _, name := range []string{"otelcol-otelctx-" + arch, "otelctx-" + arch} {
			path := filepath.Join(root, "_build", "image", name)
			checkStaticELF(t, path, m)
		}
		got, err := os.ReadFile(filepath.Join(root, "_build", "image", "otelcol-otelctx-"+arch))
		if err != nil {
			t.Fatal(err)
		}
		if same := bytes.Equal(got, want); same != (arch == "arm64") {
			t.Errorf("%s: IMAGE_BIN (arm64) copied: %v", arch, same)
		}
	}
}

// checkStaticELF: path is an executable of machine m with no interpreter.
func checkStaticELF(t *testing.T, path string, m elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if f.Machine != m {
		t.Errorf("%s: ELF machine %v, want %v", filepath.Base(path), f.Machine, m)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has an interpreter (not static)", filepath.Base(path))
		}
	}
}

// imageRef is an image reference of make image's image in a file.
var imageRef = regexp.MustCompile(`localhost/otelctx:([0-9][0-9A-Za-z.+-]*)`)

// TestImageTagIsVersion: every reference to make image's image in the
// repository's files (manifests, docs, comments) carries the tag VERSION
// gives make image, as does the one-binary recipe's dist.version; the
// CHANGELOG's history is left alone.
func TestImageTagIsVersion(t *testing.T) {
	root := repoRoot(t)
	version := readVersion(t)
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		testenv.Missing(t, "not a git checkout: "+err.Error())
	}
	refs := 0
	for _, rel := range strings.Fields(string(out)) {
		if rel == "CHANGELOG.md" || strings.HasSuffix(rel, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			continue // deleted in the work tree
		}
		for _, m := range imageRef.FindAllSubmatch(b, -1) {
			refs++
			if string(m[1]) != version {
				t.Errorf("%s: %s, VERSION is %s", rel, m[0], version)
			}
		}
	}
	if refs == 0 {
		t.Error("no reference to localhost/otelctx:VERSION found (the DaemonSet has one)")
	}
	recipe := readRepoFile(t, "deploy/profiler/builder-config-one-binary.yaml")
	if m := regexp.MustCompile(`(?m)^  version: (\S+)$`).FindStringSubmatch(recipe); m == nil || m[1] != version {
		t.Errorf("deploy/profiler/builder-config-one-binary.yaml: dist.version %v, VERSION is %s", m, version)
	}
}
