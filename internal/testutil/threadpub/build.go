// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadpub

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]*binary{}
	// mainActive: with Main, builds are shared by the test binary and removed
	// at its end; without, each test builds into its own TempDir.
	mainActive bool
)

type binary struct {
	exe  string
	args []string
}

// Main removes the builds after the tests and, when they passed, fails the
// run if a goroutine outlived them (goleak, but for testenv.LongLived).
func Main(m *testing.M) int {
	buildMu.Lock()
	mainActive = true
	buildMu.Unlock()
	defer RemoveBuilds()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(testenv.LongLived...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildDir = ""
	built = map[string]*binary{}
}

// buildKey: the writer is a flag, not part of the build.
func (c Cell) buildKey() string {
	k := c
	k.Writer = PointerSwap
	k.NoContext = false
	k.LateLoad = false
	return strings.ReplaceAll(k.String(), "/", "-")
}

// Build compiles the cell once per test binary (per test without Main); a
// missing compiler skips (fails under CI=true).
func Build(tb testing.TB, c Cell) (exe string, args []string) {
	tb.Helper()
	if d := testpub.PrebuiltDir(); d != "" {
		return prebuilt(tb, c, d)
	}
	cc := testenv.RequireTool(tb, string(c.Libc))
	if (c.Static || c.SymtabOnly) && c.Where != Exe {
		tb.Fatalf("threadpub: a static or .symtab-only executable can only define the variable itself (cell %s)", c)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	key := c.buildKey()
	cacheKey := key
	if !mainActive {
		cacheKey = fmt.Sprintf("%p/%s", tb, key)
	}
	if b, ok := built[cacheKey]; ok {
		return b.exe, append([]string(nil), b.args...)
	}
	dir := filepath.Join(buildRootLocked(tb, cacheKey), key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cb := &cellBuild{tb: tb, cc: cc, c: c, dir: dir, goarch: runtime.GOARCH}
	exe, args = cb.build()
	built[cacheKey] = &binary{exe: exe, args: args}
	return exe, append([]string(nil), args...)
}

func buildRootLocked(tb testing.TB, cacheKey string) string {
	if !mainActive {
		dir := tb.TempDir()
		tb.Cleanup(func() {
			buildMu.Lock()
			delete(built, cacheKey)
			buildMu.Unlock()
		})
		return dir
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "otelctx-threadpub-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir = d
	}
	return buildDir
}

type cellBuild struct {
	tb     testing.TB
	cc     string
	c      Cell
	dir    string
	goarch string // what cc compiles for
	dry    bool   // prebuilt: only the paths and arguments
}

var commonFlags = []string{"-O2", "-Wall", "-g"}

func (b *cellBuild) run(args ...string) {
	b.tb.Helper()
	if b.dry {
		return
	}
	if msg, err := exec.Command(b.cc, args...).CombinedOutput(); err != nil {
		b.tb.Fatalf("%s %s: %v\n%s", b.cc, strings.Join(args, " "), err, msg)
	}
}

func (b *cellBuild) flags() (variant []string, dialect string) {
	c := b.c
	switch c.Variant {
	case NotTLS:
		variant = []string{"-DOTELCTX_NOT_TLS"}
	case Protected, Hidden:
		variant = []string{"-DOTELCTX_PROTECTED"}
	case LocalDynamic:
		variant = []string{"-DOTELCTX_LOCAL_DYNAMIC"}
	case ExeAccess:
		if c.Where != SharedLib {
			b.tb.Fatalf("threadpub: ExeAccess needs a SharedLib cell (%s)", c)
		}
	case Stripped:
		variant = []string{"-s"}
	case FileLocal:
		variant = []string{"-DOTELCTX_FILE_LOCAL"}
	}
	if (c.Variant == Stripped || c.Variant == FileLocal) && !c.SymtabOnly {
		b.tb.Fatalf("threadpub: %s needs a SymtabOnly cell (%s)", c.Variant, c)
	}
	dialect = c.Dialect.flag(b.goarch)
	if c.Variant == LocalDynamic {
		dialect = GD.flag(b.goarch) // with gnu2 the module-relative access is a TLSDESC against symbol 0
	}
	return variant, dialect
}

// build skips the library when the executable defines the variable.
func (b *cellBuild) build() (exe string, args []string) {
	c, src := b.c, SourceDir()
	variant, dialect := b.flags()
	lib := filepath.Join(b.dir, "libotelctx_tls.so")
	if c.Where != Exe {
		b.run(append(append(slices.Clone(commonFlags), variant...), "-fPIC", "-shared", dialect, "-o", lib, filepath.Join(src, "otelctx_tls.c"))...)
		if c.Variant == Hidden && !b.dry {
			if err := SetDynsymVisibility(lib, "otel_thread_ctx_v1", elf.STV_HIDDEN); err != nil {
				b.tb.Fatal(err)
			}
		}
	}
	exe = filepath.Join(b.dir, "threadpub")
	pub := filepath.Join(src, "threadpub.c")
	switch c.Where {
	case Exe:
		if !b.dry {
			b.buildExe(exe, pub, variant, dialect)
		}
	case SharedLib:
		a := append(slices.Clone(commonFlags), "-pthread", "-DOTELCTX_LINKED", "-o", exe, pub, "-L"+b.dir, "-lotelctx_tls", "-Wl,-rpath,"+b.dir)
		if c.Variant == ExeAccess {
			a = append(a, "-DOTELCTX_EXE_ACCESS")
		}
		b.run(a...)
	case Dlopen, DlopenAfterExhaustion:
		b.run(append(slices.Clone(commonFlags), "-pthread", "-DOTELCTX_DLOPEN", "-o", exe, pub, "-ldl")...)
		args = []string{"--lib", lib}
	}
	if c.Where == DlopenAfterExhaustion {
		args = append(args, "--fill", strings.Join(b.fillers(), ","))
	}
	return exe, args
}

func (b *cellBuild) buildExe(exe, pub string, variant []string, dialect string) {
	c := b.c
	export := []string{"-rdynamic"}
	if c.SymtabOnly {
		export = nil
	}
	a := append(append(slices.Clone(commonFlags), variant...), "-pthread", dialect, "-o", exe, pub, filepath.Join(SourceDir(), "otelctx_tls.c"))
	a = append(a, export...)
	switch {
	case c.Static && c.SymtabOnly:
		// As such a writer does: ask for the export, which a non-PIE
		// static link silently ignores (no .dynsym).
		a = append(a, "-static", "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1")
	case c.Static:
		a = staticArgs(b.tb, c, b.goarch, a)
	}
	b.run(a...)
	if c.SymtabOnly && c.Variant != Stripped {
		if err := checkSymtabOnly(exe); err != nil {
			b.tb.Fatal(err)
		}
	}
}

// fillers use up glibc's 512-byte optional static TLS surplus (two 256-byte
// TLSDESC fillers, 8-byte ones for alignment); distinct files, since a file
// dlopen'ed twice is one module.
func (b *cellBuild) fillers() []string {
	var fills []string
	for i, n := range []int{256, 256, 8, 8, 8, 8} {
		f := filepath.Join(b.dir, fmt.Sprintf("libfill%d_%d.so", n, i))
		b.run(append(slices.Clone(commonFlags), "-fPIC", "-shared", TLSDESC.flag(b.goarch), "-DFILL_BYTES="+strconv.Itoa(n), "-o", f, filepath.Join(SourceDir(), "filler_tls.c"))...)
		fills = append(fills, f)
	}
	return fills
}

// SetDynsymVisibility patches .dynsym visibility: linkers never export a
// hidden symbol, and the dynamic linker binds its own references locally,
// so the patched library still loads.
func SetDynsymVisibility(path, name string, vis elf.SymVis) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	ds := f.SectionByType(elf.SHT_DYNSYM)
	if ds == nil || ds.Entsize != 24 {
		f.Close()
		return fmt.Errorf("%s: no 64-bit .dynsym", path)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := 0
	for i, s := range syms {
		if s.Name != name {
			continue
		}
		off := ds.Offset + uint64(i+1)*24 + 5 // st_other; entry 0 is the null symbol
		b[off] = b[off]&^3 | byte(vis)
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: %s not in .dynsym", path, name)
	}
	return os.WriteFile(path, b, 0o755)
}

// checkSymtabOnly: a toolchain that exported the variable anyway would
// make the cell test the ordinary path.
func checkSymtabOnly(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if dyn, _ := f.DynamicSymbols(); hasSym(dyn, "otel_thread_ctx_v1") {
		return fmt.Errorf("%s: otel_thread_ctx_v1 is in .dynsym, the cell wants it in .symtab only", path)
	}
	if syms, _ := f.Symbols(); !hasSym(syms, "otel_thread_ctx_v1") {
		return fmt.Errorf("%s: otel_thread_ctx_v1 is not in .symtab", path)
	}
	return nil
}

func hasSym(syms []elf.Symbol, name string) bool {
	for _, s := range syms {
		if s.Name == name && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}

// staticArgs makes a musl static PIE: plain -static has no .dynsym at all,
// and musl-gcc's specs do not know -static-pie (they add an INTERP), hence
// rcrt1.o and explicit linker flags.
func staticArgs(tb testing.TB, c Cell, goarch string, a []string) []string {
	tb.Helper()
	if c.Libc == Glibc {
		// gcc -static-pie -Wl,--export-dynamic crashes at start-up
		// (glibc 2.36, gcc 12); a dynamic list of just the variable works.
		return append(a, "-static-pie", "-Wl,--dynamic-list="+filepath.Join(SourceDir(), "otelctx.dynlist"))
	}
	gcc, lib := "gcc", "/usr/lib/x86_64-linux-musl/"
	if goarch == "arm64" {
		gcc, lib = "aarch64-linux-gnu-gcc", "/usr/lib/aarch64-linux-musl/"
	}
	gcc = testenv.RequireTool(tb, gcc)
	crt := func(name string) string {
		out, err := exec.Command(gcc, "-print-file-name="+name).Output()
		if err != nil {
			tb.Fatalf("gcc -print-file-name=%s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	out := []string{"-fPIE", "-nostartfiles", lib + "rcrt1.o", lib + "crti.o", crt("crtbeginS.o")}
	out = append(out, a...)
	return append(out, crt("crtendS.o"), lib+"crtn.o",
		"-Wl,-static", "-Wl,-pie", "-Wl,--no-dynamic-linker", "-Wl,-z,text", "-Wl,--export-dynamic")
}
