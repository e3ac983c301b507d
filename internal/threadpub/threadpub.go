// Package threadpub compiles and drives the C thread-context publisher in
// testdata/threadpub: real processes whose threads publish OTEP 4947
// records through otel_thread_ctx_v1, in every cell of the TLS conformance
// matrix (libc × where the variable is defined × TLS dialect × writer).
//
// Typical use (see internal/scan/tlsvar's tests):
//
//	func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) } // share builds, remove them at the end
//
//	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC})
//	p.Threads(3)                                   // workers 0..2, parked
//	truth := p.Set(0, threadpub.Record{TraceID: ..., SpanID: ..., Flags: 1, Attrs: map[uint8]string{0: "/api"}})
//	// truth.TID, truth.ThreadPointer, truth.Slot (&otel_thread_ctx_v1 in
//	// that thread), truth.Record (what the slot points at). The worker is
//	// parked in a futex until the next command for it, so its record is
//	// stable while a reader looks (with or without ptrace).
//
// The process also publishes an OTEP 4719 process context with
// threadlocal.schema_version=tlsdesc_v1_dev and
// threadlocal.attribute_key_map=[http.route, http.request.method, user.id].
package threadpub

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"go.uber.org/goleak"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testenv"
	"github.com/otelctx/otelctx/internal/testpub"
)

// The thread-local reference data the publisher puts in its process
// context (must match threadpub.c).
const SchemaVersion = "tlsdesc_v1_dev"

// KeyMap is the published threadlocal.attribute_key_map: Record.Attrs keys
// index it.
var KeyMap = []string{"http.route", "http.request.method", "user.id"}

// Libc selects the compiler driver, and so the C library.
type Libc string

// The C libraries.
const (
	Glibc Libc = "gcc"      // the system compiler, glibc
	Musl  Libc = "musl-gcc" // musl-tools' wrapper
)

// Where the variable is defined.
type Where uint8

// Placements of otel_thread_ctx_v1.
const (
	Exe                   Where = iota // in the executable (linked -rdynamic so it is in .dynsym)
	SharedLib                          // in libotelctx_tls.so, a DT_NEEDED of the executable
	Dlopen                             // in libotelctx_tls.so, dlopen'ed before the workers start
	DlopenAfterExhaustion              // dlopen'ed after filler libraries used up glibc's static TLS surplus
)

func (w Where) String() string {
	return [...]string{"exe", "sharedlib", "dlopen", "dlopen-exhausted"}[w]
}

// Dialect is the TLS dialect the library (or executable) is compiled with.
type Dialect uint8

// Dialects.
const (
	TLSDESC Dialect = iota // -mtls-dialect=gnu2
	GD                     // -mtls-dialect=gnu: legacy General Dynamic (__tls_get_addr)
)

func (d Dialect) String() string { return [...]string{"tlsdesc", "gd"}[d] }

func (d Dialect) flag() string { return [...]string{"-mtls-dialect=gnu2", "-mtls-dialect=gnu"}[d] }

// Writer is how worker threads update their record (OTEP 4947 allows both).
type Writer uint8

// Writer styles.
const (
	PointerSwap Writer = iota // NULL while building, then point at the new record
	ValidFlip                 // one record per thread, valid=0 while mutating
)

func (w Writer) String() string { return [...]string{"swap", "flip"}[w] }

// Variant builds deliberately wrong variables for negative tests.
type Variant uint8

// Variants.
const (
	Normal       Variant = iota
	NotTLS               // a plain global named otel_thread_ctx_v1 (STT_OBJECT)
	Protected            // STT_TLS but protected visibility
	Hidden               // the Protected build with its .dynsym entry patched to STV_HIDDEN
	LocalDynamic         // exported, but only accessed with Local Dynamic (DTPMOD64 against symbol 0); forces -mtls-dialect=gnu
	ExeAccess            // SharedLib only: the executable also accesses the variable directly (undefined in its .dynsym, Initial Exec TPOFF64)
	Stripped             // SymtabOnly only: the executable is stripped, so the variable is in no symbol table
	FileLocal            // SymtabOnly only: the variable is file-static (STB_LOCAL in .symtab)
)

func (v Variant) String() string {
	return [...]string{"", "nottls", "protected", "hidden", "localdynamic", "exeaccess", "stripped", "filelocal"}[v]
}

// Cell is one configuration of the conformance matrix.
type Cell struct {
	Libc    Libc
	Where   Where
	Dialect Dialect
	// Static links the executable statically (Where must be Exe): a
	// static PIE, the only static kind that keeps a .dynsym.
	Static bool
	// SymtabOnly (Where Exe) builds the executable the way writers that
	// do not export the variable are built, so that it is only in
	// .symtab: with Static, plain -static (non-PIE, no .dynsym at all,
	// --export-dynamic-symbol notwithstanding); without, a dynamic
	// executable linked without -rdynamic.
	SymtabOnly bool
	Writer     Writer
	Variant    Variant
	// NoContext skips publishing the process context.
	NoContext bool
	// LateLoad (Dlopen cells) loads nothing at start-up: Publisher.Load
	// dlopens the fillers and the library later, e.g. after workers exist,
	// as a plugin loaded while a profiler is already watching would be.
	LateLoad bool
}

func (c Cell) String() string {
	s := fmt.Sprintf("%s/%s/%s/%s", libcName(c.Libc), c.Where, c.Dialect, c.Writer)
	if c.Static {
		s += "/static"
	}
	if c.SymtabOnly {
		s += "/symtab"
	}
	if c.Variant != Normal {
		s += "/" + c.Variant.String()
	}
	if c.LateLoad {
		s += "/late"
	}
	return s
}

func libcName(l Libc) string {
	if l == Musl {
		return "musl"
	}
	return "glibc"
}

// Matrix is the conformance matrix: {glibc, musl} × {exe, shared lib,
// dlopen, dlopen after exhaustion} × {TLSDESC, GD}, plus, for each libc, a
// static PIE executable, and two whose variable is only in .symtab (a
// static non-PIE one and a dynamic one not linked -rdynamic), each with
// both writer styles.
func Matrix() []Cell {
	var out []Cell
	for _, w := range []Writer{PointerSwap, ValidFlip} {
		for _, l := range []Libc{Glibc, Musl} {
			for _, where := range []Where{Exe, SharedLib, Dlopen, DlopenAfterExhaustion} {
				for _, d := range []Dialect{TLSDESC, GD} {
					out = append(out, Cell{Libc: l, Where: where, Dialect: d, Writer: w})
				}
			}
		}
		out = append(out, Cell{Libc: Glibc, Where: Exe, Dialect: TLSDESC, Static: true, Writer: w})
		out = append(out, Cell{Libc: Musl, Where: Exe, Dialect: TLSDESC, Static: true, Writer: w})
		for _, l := range []Libc{Glibc, Musl} {
			out = append(out, Cell{Libc: l, Where: Exe, Dialect: TLSDESC, Static: true, SymtabOnly: true, Writer: w})
			out = append(out, Cell{Libc: l, Where: Exe, Dialect: TLSDESC, SymtabOnly: true, Writer: w})
		}
	}
	return out
}

// SourceDir is testdata/threadpub.
func SourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "threadpub")
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]*binary{}
	// mainActive: Main runs the tests, so builds are shared by the whole
	// test binary and removed at its end. Without Main there is no end to
	// hook, so builds go to the test's own TempDir and are shared only
	// within that test (slower, but nothing is left behind in /tmp).
	mainActive bool
)

// binary is a built cell: the executable and its arguments.
type binary struct {
	exe  string
	args []string
}

// Main runs the tests, removes the builds afterwards and, when the tests
// passed, fails the run if a goroutine outlived them (goleak):
// func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }.
func Main(m *testing.M) int {
	buildMu.Lock()
	mainActive = true
	buildMu.Unlock()
	defer RemoveBuilds()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// RemoveBuilds deletes every build of this test binary.
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildDir = ""
	built = map[string]*binary{}
}

// buildKey is what changes the compiled files (the writer is a flag).
func (c Cell) buildKey() string {
	k := c
	k.Writer = PointerSwap
	k.NoContext = false
	k.LateLoad = false
	return strings.ReplaceAll(k.String(), "/", "-")
}

// Build compiles the cell once per test binary (once per test without
// Main) and returns the executable and the arguments it needs. A missing
// compiler skips (fails under CI=true).
func Build(tb testing.TB, c Cell) (exe string, args []string) {
	tb.Helper()
	cc := testenv.RequireTool(tb, string(c.Libc))
	if (c.Static || c.SymtabOnly) && c.Where != Exe {
		tb.Fatalf("threadpub: a static or .symtab-only executable can only define the variable itself (cell %s)", c)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	key := c.buildKey()
	cacheKey, root := key, buildDir
	if !mainActive {
		cacheKey = fmt.Sprintf("%p/%s", tb, key)
	}
	if b, ok := built[cacheKey]; ok {
		return b.exe, append([]string(nil), b.args...)
	}
	switch {
	case !mainActive:
		root = tb.TempDir()
		tb.Cleanup(func() {
			buildMu.Lock()
			delete(built, cacheKey)
			buildMu.Unlock()
		})
	case root == "":
		d, err := os.MkdirTemp("", "otelctx-threadpub-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir, root = d, d
	}
	dir := filepath.Join(root, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	src := SourceDir()
	run := func(args ...string) {
		tb.Helper()
		if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			tb.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, msg)
		}
	}
	common := []string{"-O2", "-Wall", "-g"}
	var variant []string
	switch c.Variant {
	case NotTLS:
		variant = []string{"-DOTELCTX_NOT_TLS"}
	case Protected, Hidden:
		variant = []string{"-DOTELCTX_PROTECTED"}
	case LocalDynamic:
		variant = []string{"-DOTELCTX_LOCAL_DYNAMIC"}
	case ExeAccess:
		if c.Where != SharedLib {
			tb.Fatalf("threadpub: ExeAccess needs a SharedLib cell (%s)", c)
		}
	case Stripped:
		variant = []string{"-s"}
	case FileLocal:
		variant = []string{"-DOTELCTX_FILE_LOCAL"}
	}
	if (c.Variant == Stripped || c.Variant == FileLocal) && !c.SymtabOnly {
		tb.Fatalf("threadpub: %s needs a SymtabOnly cell (%s)", c.Variant, c)
	}
	dialect := c.Dialect.flag()
	if c.Variant == LocalDynamic {
		dialect = GD.flag() // with gnu2 the module-relative access is a TLSDESC against symbol 0
	}
	lib := filepath.Join(dir, "libotelctx_tls.so")
	if c.Where != Exe {
		run(append(append(append([]string{}, common...), variant...), "-fPIC", "-shared", dialect, "-o", lib, filepath.Join(src, "otelctx_tls.c"))...)
		if c.Variant == Hidden {
			if err := SetDynsymVisibility(lib, "otel_thread_ctx_v1", elf.STV_HIDDEN); err != nil {
				tb.Fatal(err)
			}
		}
	}
	exe = filepath.Join(dir, "threadpub")
	pub := filepath.Join(src, "threadpub.c")
	switch c.Where {
	case Exe:
		export := []string{"-rdynamic"}
		if c.SymtabOnly {
			export = nil
		}
		a := append(append(append([]string{}, common...), variant...), "-pthread", dialect, "-o", exe, pub, filepath.Join(src, "otelctx_tls.c"))
		a = append(a, export...)
		switch {
		case c.Static && c.SymtabOnly:
			// What such a writer does: ask for the export, which a
			// non-PIE static link silently ignores (no .dynsym).
			a = append(a, "-static", "-Wl,--export-dynamic-symbol=otel_thread_ctx_v1")
		case c.Static:
			a = staticArgs(tb, c, a)
		}
		run(a...)
		if c.SymtabOnly && c.Variant != Stripped {
			if err := checkSymtabOnly(exe); err != nil {
				tb.Fatal(err)
			}
		}
	case SharedLib:
		a := append(append([]string{}, common...), "-pthread", "-DOTELCTX_LINKED", "-o", exe, pub, "-L"+dir, "-lotelctx_tls", "-Wl,-rpath,"+dir)
		if c.Variant == ExeAccess {
			a = append(a, "-DOTELCTX_EXE_ACCESS")
		}
		run(a...)
	case Dlopen, DlopenAfterExhaustion:
		run(append(append([]string{}, common...), "-pthread", "-DOTELCTX_DLOPEN", "-o", exe, pub, "-ldl")...)
		args = []string{"--lib", lib}
	}
	if c.Where == DlopenAfterExhaustion {
		// glibc's optional static TLS surplus is 512 bytes by default
		// (glibc.rtld.optional_static_tls): two 256-byte TLSDESC fillers use
		// it up, the 8-byte ones sweep whatever alignment left. Distinct
		// files: dlopen of the same file twice is one module.
		var fills []string
		for i, n := range []int{256, 256, 8, 8, 8, 8} {
			f := filepath.Join(dir, fmt.Sprintf("libfill%d_%d.so", n, i))
			run(append(append([]string{}, common...), "-fPIC", "-shared", "-mtls-dialect=gnu2", "-DFILL_BYTES="+strconv.Itoa(n), "-o", f, filepath.Join(src, "filler_tls.c"))...)
			fills = append(fills, f)
		}
		args = append(args, "--fill", strings.Join(fills, ","))
	}
	built[cacheKey] = &binary{exe: exe, args: args}
	return exe, append([]string(nil), args...)
}

// Publisher is one running thread-context publisher. It speaks the same
// line protocol as the process-context publisher ("ready PID", then one
// "ok …"/"err …" line per command), so the process is driven by testpub.
type Publisher struct {
	tb   testing.TB
	proc *testpub.Publisher
	Cell Cell
	PID  int
	// Exe is the executable and Lib the library defining the variable
	// ("" for Exe cells).
	Exe, Lib string
}

// ReplyTimeout bounds every wait for the publisher's answer (dlopen and
// thread start-up under -race take longer than a process-context command).
var ReplyTimeout = 20 * time.Second

// Start builds (once) and runs a publisher for the cell; it is killed when
// the test ends.
func Start(tb testing.TB, c Cell) *Publisher {
	tb.Helper()
	exe, args := Build(tb, c)
	if c.Writer == ValidFlip {
		args = append(args, "--writer", "flip")
	}
	if c.NoContext {
		args = append(args, "--no-context")
	}
	if c.LateLoad {
		if c.Where != Dlopen && c.Where != DlopenAfterExhaustion {
			tb.Fatalf("threadpub: LateLoad needs a dlopen cell (%s)", c)
		}
		args = append(args, "--late")
	}
	proc := testpub.StartBinaryTimeout(tb, ReplyTimeout, exe, args...)
	p := &Publisher{tb: tb, proc: proc, Cell: c, PID: proc.PID, Exe: exe}
	if c.Where != Exe {
		p.Lib = filepath.Join(filepath.Dir(exe), "libotelctx_tls.so")
	}
	return p
}

// Do sends one command and returns the fields after "ok"; "err" fails the test.
func (p *Publisher) Do(format string, args ...any) []string {
	p.tb.Helper()
	return p.proc.Do(format, args...)
}

// Load dlopens the fillers and the library of a LateLoad cell.
func (p *Publisher) Load() {
	p.tb.Helper()
	p.Do("load")
}

// Threads starts n more worker threads and returns the total.
func (p *Publisher) Threads(n int) int {
	p.tb.Helper()
	f := p.Do("threads %d", n)
	total, _ := strconv.Atoi(f[0])
	return total
}

// Record is what a worker publishes.
type Record struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   uint8
	// Attrs maps key indexes (into the key map) to values (no spaces).
	Attrs map[uint8]string
}

// Truth is what a thread reports about itself.
type Truth struct {
	TID           int
	ThreadPointer uint64 // fs_base / TPIDR_EL0
	Slot          uint64 // &otel_thread_ctx_v1 as seen by the thread
	Record        uint64 // what the slot points at (0 after Clear with the swap writer)
}

// Set makes worker k publish r and park; it returns the worker's truth.
func (p *Publisher) Set(k int, r Record) Truth {
	p.tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "set %d %s %s %d", k, hex.EncodeToString(r.TraceID[:]), hex.EncodeToString(r.SpanID[:]), r.Flags)
	keys := make([]int, 0, len(r.Attrs))
	for k := range r.Attrs {
		keys = append(keys, int(k))
	}
	sort.Ints(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %d=%s", k, r.Attrs[uint8(k)])
	}
	return p.truth(p.Do("%s", b.String()), 4)
}

// Clear makes worker k withdraw its record (NULL pointer with the swap
// writer, valid=0 with the flip writer) and park.
func (p *Publisher) Clear(k int) Truth {
	p.tb.Helper()
	return p.truth(p.Do("clear %d", k), 4)
}

// Info returns worker k's TID and thread pointer without it touching the
// variable (for a dynamic-TLS module: its block stays unallocated).
func (p *Publisher) Info(k int) Truth {
	p.tb.Helper()
	return p.truth(p.Do("info %d", k), 2)
}

// Main returns the main thread's truth (it touches the variable).
func (p *Publisher) Main() Truth {
	p.tb.Helper()
	return p.truth(p.Do("main"), 3)
}

func (p *Publisher) truth(f []string, n int) Truth {
	p.tb.Helper()
	if len(f) < n {
		p.tb.Fatalf("threadpub %d: short reply %q", p.PID, f)
	}
	var t Truth
	var err error
	if t.TID, err = strconv.Atoi(f[0]); err != nil {
		p.tb.Fatalf("threadpub %d: reply %q: %v", p.PID, f, err)
	}
	vals := []*uint64{&t.ThreadPointer, &t.Slot, &t.Record}
	for i := 1; i < n; i++ {
		if *vals[i-1], err = strconv.ParseUint(f[i], 0, 64); err != nil {
			p.tb.Fatalf("threadpub %d: reply %q: %v", p.PID, f, err)
		}
	}
	return t
}

// Kill kills the publisher and waits for it.
func (p *Publisher) Kill() { p.proc.Kill() }

// SetDynsymVisibility rewrites the visibility bits of name's .dynsym
// entries in the ELF file at path. Linkers never export a hidden symbol,
// so this is the only way to get one for a reader's negative test; the
// dynamic linker binds a hidden symbol's own references locally, so the
// patched library still loads.
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

// checkSymtabOnly makes sure a SymtabOnly build is what it claims: the
// variable in .symtab and not in .dynsym (a toolchain that exported it
// anyway would make the cell test the ordinary path).
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

// staticArgs turns the executable's compile arguments into a musl static
// PIE. A plain -static executable has no .dynsym at all (ld creates no
// dynamic sections without -pie, --export-dynamic notwithstanding), so the
// variable would not be exported; musl-gcc's specs do not know -static-pie
// (they add an INTERP), hence the explicit rcrt1.o (musl's self-relocating
// start file) and linker flags.
func staticArgs(tb testing.TB, c Cell, a []string) []string {
	tb.Helper()
	if c.Libc == Glibc {
		// gcc -static-pie -Wl,--export-dynamic links, but the result
		// crashes at start-up (glibc 2.36, gcc 12); exporting just the
		// variable with a dynamic list works.
		return append(a, "-static-pie", "-Wl,--dynamic-list="+filepath.Join(SourceDir(), "otelctx.dynlist"))
	}
	gcc := testenv.RequireTool(tb, "gcc")
	crt := func(name string) string {
		out, err := exec.Command(gcc, "-print-file-name="+name).Output()
		if err != nil {
			tb.Fatalf("gcc -print-file-name=%s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	const lib = "/usr/lib/x86_64-linux-musl/"
	if runtime.GOARCH == "arm64" {
		tb.Skip("threadpub: static musl cell only wired for x86-64")
	}
	out := []string{"-fPIE", "-nostartfiles", lib + "rcrt1.o", lib + "crti.o", crt("crtbeginS.o")}
	out = append(out, a...)
	return append(out, crt("crtendS.o"), lib+"crtn.o",
		"-Wl,-static", "-Wl,-pie", "-Wl,--no-dynamic-linker", "-Wl,-z,text", "-Wl,--export-dynamic")
}

// Span is one span of a switch run, as the worker recorded it: the record
// was visible from Start to End (both read on the worker itself, so any
// sample of that thread between them must show this record).
type Span struct {
	Index              int
	TraceID            string // 32 hex
	SpanID             string // 16 hex
	BootStart, BootEnd uint64 // CLOCK_BOOTTIME ns
	RealStart, RealEnd int64  // CLOCK_REALTIME ns
}

// SwitchTruth is the ground truth of one switch run.
type SwitchTruth struct {
	Spans []Span
	// DoneBoot / DoneReal: the record was withdrawn before this instant.
	DoneBoot uint64
	DoneReal int64
}

// Switch starts a switch run on worker k: n spans of ms milliseconds each,
// busy-looping, ground truth appended to path (see threadpub.c). It
// returns the worker's TID at once; Wait waits for the end.
func (p *Publisher) Switch(k, n, ms int, path string) int {
	p.tb.Helper()
	f := p.Do("switch %d %d %d %s", k, n, ms, path)
	tid, err := strconv.Atoi(f[0])
	if err != nil {
		p.tb.Fatalf("threadpub %d: switch reply %q", p.PID, f)
	}
	return tid
}

// Wait waits until worker k's switch run is over.
func (p *Publisher) Wait(k int) {
	p.tb.Helper()
	p.Do("wait %d", k)
}

// ReadSwitchTruth parses the ground truth a switch run wrote to path (after
// Wait).
func ReadSwitchTruth(path string) (SwitchTruth, error) {
	var t SwitchTruth
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 8 && f[0] == "span":
			var s Span
			var e [5]error
			s.Index, e[0] = strconv.Atoi(f[1])
			s.TraceID, s.SpanID = f[2], f[3]
			s.BootStart, e[1] = strconv.ParseUint(f[4], 10, 64)
			s.BootEnd, e[2] = strconv.ParseUint(f[5], 10, 64)
			s.RealStart, e[3] = strconv.ParseInt(f[6], 10, 64)
			s.RealEnd, e[4] = strconv.ParseInt(f[7], 10, 64)
			for _, err := range e {
				if err != nil {
					return t, fmt.Errorf("%s: %q: %w", path, line, err)
				}
			}
			t.Spans = append(t.Spans, s)
		case len(f) == 3 && f[0] == "done":
			var e1, e2 error
			t.DoneBoot, e1 = strconv.ParseUint(f[1], 10, 64)
			t.DoneReal, e2 = strconv.ParseInt(f[2], 10, 64)
			if e1 != nil || e2 != nil {
				return t, fmt.Errorf("%s: %q", path, line)
			}
		default:
			return t, fmt.Errorf("%s: unexpected line %q", path, line)
		}
	}
	if t.DoneBoot == 0 {
		return t, fmt.Errorf("%s: run not finished", path)
	}
	return t, nil
}

// Crowd runs n short-lived threads that each publish a record, do loops
// iterations of integer work (swapping records every `every` iterations)
// and exit; it returns the wall time of the whole run and the CPU time the
// process used meanwhile. Raise ReplyTimeout for long runs.
func (p *Publisher) Crowd(n, loops, every int) (wall, cpu time.Duration) {
	p.tb.Helper()
	f := p.Do("crowd %d %d %d", n, loops, every)
	if len(f) != 2 {
		p.tb.Fatalf("threadpub %d: crowd reply %q", p.PID, f)
	}
	w, err1 := strconv.ParseInt(f[0], 10, 64)
	c, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		p.tb.Fatalf("threadpub %d: crowd reply %q", p.PID, f)
	}
	return time.Duration(w), time.Duration(c)
}
