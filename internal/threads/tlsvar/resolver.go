// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/otelctx/otelctx/internal/proc/safemem"
)

// Resolver caches each ELF file's facts by device, inode, size and mtime, so
// a second process of the same binaries costs a maps read and a few remote
// reads. Safe for concurrent use.
type Resolver struct {
	procRoot string

	mu    sync.Mutex
	cache map[fileKey]cacheEntry

	// openSymtab lets tests inject failures (nil: as facts opens).
	openSymtab func(path string) (symtabFile, error)
}

type symtabFile interface {
	io.ReaderAt
	Stat() (os.FileInfo, error)
	Close() error
}

type fileKey struct {
	dev, ino   uint64
	size       int64
	mtimeNanos int64
}

// maxCached: dropping a full cache is cheaper than tracking recency.
const maxCached = 4096

func NewResolver(procRoot string) *Resolver {
	return &Resolver{procRoot: procRoot, cache: map[fileKey]cacheEntry{}}
}

type module struct {
	path  string
	mm    *moduleMaps
	start uint64 // address of the mapping holding the ELF header
	bias  uint64 // load bias: runtime address = bias + vaddr
	facts *elfFacts
	guard *mountGuard // the process's mounts, as when the module was opened
}

// dynAddr identifies the module in the dynamic linker's list (glibc l_ld,
// musl dso.dynv) whatever name it was loaded under.
func (m *module) dynAddr() uint64 { return m.bias + m.facts.dynVaddr }

func (r *Resolver) Resolve(pid int) (*Location, error) {
	return r.ResolveContext(context.Background(), pid)
}

// ResolveContext stops allocating and reading once ctx is done (its caller
// gave up): the error is then ErrTransient.
func (r *Resolver) ResolveContext(ctx context.Context, pid int) (*Location, error) {
	mem := newMemBudget(ctx)
	defer mem.release()
	procDir := r.procRoot + "/" + strconv.Itoa(pid)
	mods, exe, skipped, err := r.modules(procDir, mem)
	if err != nil {
		return nil, err
	}
	def, sym, table, err := r.definition(procDir, mods, exe, mem)
	if errors.Is(err, ErrNotFound) && skipped.refused != nil {
		return nil, fmt.Errorf("%w: %w, and some mapped files were refused: %w", ErrLimit, err, skipped.refused)
	}
	if errors.Is(err, ErrNotFound) && skipped.unreadable != nil {
		return nil, fmt.Errorf("%w, but some mapped files could not be read: %w", err, skipped.unreadable)
	}
	if err != nil {
		return nil, err
	}
	loc := &Location{Arch: def.facts.arch, Module: def.path, Symbol: SymbolName, ModuleBase: def.bias, SymOffset: sym.value, SymbolTable: table}
	if table == SymbolTableDynsym && def.facts.symName != "" {
		loc.Symbol = def.facts.symName
	}
	if table == SymbolTableSymtab {
		// Unexported: the executable's own linker-relaxed accesses are all.
		loc.Model = ModelLocalExec
	} else {
		loc.Model = classifyModel(mods, def, exe)
	}
	if loc.Model == ModelLocalDynamic {
		return nil, fmt.Errorf("%w: %s in %q is only accessed through Local Dynamic (module-relative) relocations", ErrUnsupported, SymbolName, def.path)
	}
	if def.facts.tls == nil {
		return nil, fmt.Errorf("%w: %q defines a TLS symbol but has no PT_TLS segment", ErrUnsupported, def.path)
	}
	// The link map, _r_debug and DT_DEBUG are addresses the process chose.
	if err := place(loc, safemem.New(r.procRoot, pid), mods, def, exe); err != nil {
		if errors.Is(err, safemem.ErrFileBacked) {
			// A page of a file not in memory now: nothing learnt about the process.
			return nil, fmt.Errorf("%w: %w", ErrTransient, err)
		}
		return nil, err
	}
	return loc, nil
}

// skippedFiles: the first file we may not read, so a reader lacking
// privileges is told so instead of "not found", and the first refused as
// over a bound (ErrLimit).
type skippedFiles struct{ unreadable, refused error }

// moduleCost is what a module adds to a resolution besides its path.
const moduleCost = 256

func (r *Resolver) modules(procDir string, mem *memBudget) (mods []*module, exe *module, skipped skippedFiles, err error) {
	entry, _ := auxvEntry(procDir)
	f, err := os.Open(procDir + "/maps")
	if err != nil {
		return nil, nil, skipped, err
	}
	groups, err := readModules(f, entry, mem)
	f.Close()
	if err != nil {
		return nil, nil, skipped, fmt.Errorf("%s/maps: %w", procDir, err)
	}
	guard, err := readMountGuard(procDir, mem)
	if err != nil && !errors.Is(err, os.ErrNotExist) { // gone since its maps were read: its files fail below
		return nil, nil, skipped, err
	}
	pageMask := uint64(os.Getpagesize() - 1)
	var br *blockReader // one per resolution, for every file
	for _, mm := range groups {
		if guard != nil && guard.fuseDevs[mm.dev] {
			continue
		}
		if err := mem.take(moduleCost); err != nil {
			return nil, nil, skipped, err
		}
		facts, err := r.facts(procDir, mm, guard, mem, &br)
		switch {
		case err == nil:
		case errors.Is(err, ErrTransient), errors.Is(err, ErrLimit) && !errors.Is(err, errELFBudget):
			// Abandoned, or over the resolution's memory: nothing more is read.
			return nil, nil, skipped, err
		case errors.Is(err, ErrLimit):
			if skipped.refused == nil {
				skipped.refused = err
			}
			continue
		default:
			// Not ELF (data files, memfds), malformed, unreadable.
			if skipped.unreadable == nil && errors.Is(err, os.ErrPermission) {
				skipped.unreadable = err
			}
			continue
		}
		m := &module{path: mm.path, mm: mm, start: mm.first.start, facts: facts, guard: guard}
		m.bias = mm.first.start - (facts.minLoad &^ pageMask)
		mods = append(mods, m)
		if exe == nil && mm.holdsEntry {
			exe = m
		}
	}
	if exe == nil { // no auxv (permissions): the file with PT_INTERP or ET_EXEC
		for _, m := range mods {
			if m.facts.hasInterp || m.facts.typ == elf.ET_EXEC {
				exe = m
				break
			}
		}
	}
	return mods, exe, skipped, nil
}

func (r *Resolver) definition(procDir string, mods []*module, exe *module, mem *memBudget) (*module, symInfo, string, error) {
	def, err := pickDefinition(mods, exe)
	sym, table := symInfo{}, SymbolTableDynsym
	if def != nil {
		sym = def.facts.sym
	}
	if errors.Is(err, ErrNotFound) && exe != nil {
		// Not exported (plain -static): the executable's .symtab may name it.
		if sym, err = r.symtabSym(procDir, exe, mem); err == nil {
			def, table = exe, SymbolTableSymtab
		}
	}
	return def, sym, table, err
}

func place(loc *Location, mem Memory, mods []*module, def, exe *module) error {
	var glibcLd, muslLd, libc *module
	for _, m := range mods {
		switch {
		case glibcLd == nil && defined(m.facts.rDebug):
			glibcLd = m
		case muslLd == nil && defined(m.facts.dlDebugAddr):
			muslLd = m
		}
		if libc == nil && defined(m.facts.tdbTLSOff) && defined(m.facts.tdbTLSModid) {
			libc = m
		}
	}
	switch {
	case def == exe && !exe.facts.hasInterp:
		// Static: module 1 at a fixed offset (a static glibc may export
		// _r_debug, but nothing needs it).
		loc.Libc = Musl
		if exe.facts.glibcMarker || defined(exe.facts.rDebug) {
			loc.Libc = Glibc
		}
		return placeStaticExe(loc, exe.facts.tls)
	case muslLd != nil:
		loc.Libc = Musl
		return placeMusl(loc, mem, muslLd, def)
	case glibcLd != nil || (exe != nil && exe.facts.hasInterp):
		loc.Libc = Glibc
		return placeGlibc(loc, mem, glibcLd, libc, exe, def)
	}
	return fmt.Errorf("%w: %q is in a shared object but no glibc or musl dynamic linker is loaded", ErrUnsupported, def.path)
}

func defined(s symInfo) bool { return s.found && s.shndx != elf.SHN_UNDEF }

// pickDefinition: the executable's comes first in the global scope, else the
// first module; invalid ones are reported only when none is valid.
func pickDefinition(mods []*module, exe *module) (*module, error) {
	var valid []*module
	var reasons []string
	for _, m := range mods {
		s := m.facts.sym
		if !s.found {
			continue
		}
		if why := symProblem(s); why != "" {
			reasons = append(reasons, strconv.Quote(m.path)+": "+why)
			continue
		}
		valid = append(valid, m)
	}
	if len(valid) == 0 {
		if len(reasons) > 0 {
			return nil, fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(reasons, "; "))
		}
		return nil, ErrNotFound
	}
	for _, m := range valid {
		if m == exe {
			return m, nil
		}
	}
	return valid[0], nil
}

func symProblem(s symInfo) string {
	switch {
	case s.shndx == elf.SHN_UNDEF:
		return "symbol is undefined (a reference, not a definition)"
	case s.typ != elf.STT_TLS:
		return fmt.Sprintf("symbol is %v, not STT_TLS", s.typ)
	case s.bind != elf.STB_GLOBAL && s.bind != elf.STB_WEAK:
		return fmt.Sprintf("symbol binding is %v, not GLOBAL or WEAK", s.bind)
	case s.vis != elf.STV_DEFAULT:
		return fmt.Sprintf("symbol visibility is %v, not default", s.vis)
	}
	return ""
}

// classifyModel: the model is informative (placement decides how to read),
// but Local Dynamic is refused as OTEP 4947 allows.
func classifyModel(mods []*module, def, exe *module) Model {
	var all tlsRelocs
	for _, m := range mods {
		r := m.facts.relocs
		if def.facts.symName == NodeSymbolName {
			r = m.facts.nodeRelocs
		}
		all.tlsdesc = all.tlsdesc || r.tlsdesc
		all.dtpmod = all.dtpmod || r.dtpmod
		all.dtpoff = all.dtpoff || r.dtpoff
		all.tpoff = all.tpoff || r.tpoff
	}
	switch {
	case all.tlsdesc:
		return ModelTLSDESC
	case all.dtpmod:
		return ModelGeneralDynamic
	case all.tpoff:
		return ModelInitialExec
	case def == exe:
		return ModelLocalExec
	case def.facts.relocs.dtpmodLocal || def.facts.nodeRelocs.dtpmodLocal:
		return ModelLocalDynamic
	}
	return ModelUnknown
}

// facts checks the file before opening it for reading (a mapped device node
// must not be opened) and caches results, "not ELF" too, per (device, inode,
// size, mtime).
func (r *Resolver) facts(procDir string, mm *moduleMaps, guard *mountGuard, mem *memBudget, brp **blockReader) (*elfFacts, error) {
	mf, err := openModule(procDir, mm, guard)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	path, key := mf.path(), mf.key
	r.mu.Lock()
	ce, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return ce.facts, ce.err
	}
	f, err := openNoPoll(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q: not a regular file when opened", path)
	}
	if k, err := keyOf(fi, nil); err != nil || k != key {
		return nil, fmt.Errorf("%q changed while being opened", path)
	}
	// Tables are sized by the headers: a sparse file can claim gigabytes
	// for free, so what is read is bounded too.
	src := &budgetReaderAt{r: f, left: maxELFRead, mem: mem}
	if *brp == nil {
		if *brp, err = newBlockReader(src, uint64(key.size), mem); err != nil {
			return nil, err
		}
	}
	(*brp).reset(src)
	ef, err := parseGuarded(*brp, uint64(key.size), mem)
	if ef != nil {
		ef.key, ef.budgetLeft = key, src.left
	}
	if errors.Is(err, ErrTransient) || (errors.Is(err, ErrLimit) && !errors.Is(err, errELFBudget)) {
		return nil, err // about this resolution, not the file: not cached
	}
	r.mu.Lock()
	if len(r.cache) >= maxCached {
		r.cache = map[fileKey]cacheEntry{}
	}
	r.cache[key] = cacheEntry{facts: ef, err: err}
	r.mu.Unlock()
	return ef, err
}

// symtabSym keeps only answers about the file itself in its shared facts;
// open or read failures say nothing about the file and are ErrTransient.
func (r *Resolver) symtabSym(procDir string, exe *module, mem *memBudget) (symInfo, error) {
	ef := exe.facts
	r.mu.Lock()
	done, sym, err := ef.symtabDone, ef.symtabSym, ef.symtabErr
	r.mu.Unlock()
	if done {
		return sym, err
	}
	if ef.symtab == nil {
		sym, err = symInfo{}, ErrNotFound
	} else {
		sym, err = r.readSymtab(procDir, exe, ef, mem)
	}
	if errors.Is(err, ErrTransient) || (errors.Is(err, ErrLimit) && !errors.Is(err, errELFBudget)) {
		return symInfo{}, err
	}
	r.mu.Lock()
	ef.symtabDone, ef.symtabSym, ef.symtabErr = true, sym, err
	r.mu.Unlock()
	return sym, err
}

func (r *Resolver) readSymtab(procDir string, exe *module, ef *elfFacts, mem *memBudget) (symInfo, error) {
	transient := func(err error) (symInfo, error) {
		return symInfo{}, fmt.Errorf("%w: the executable's .symtab could not be read: %w", ErrTransient, err)
	}
	mf, err := openModule(procDir, exe.mm, exe.guard)
	if err != nil {
		return transient(err)
	}
	defer mf.Close()
	path, key := mf.path(), mf.key
	if key != ef.key {
		return transient(fmt.Errorf("%q changed since it was parsed", path))
	}
	open := r.openSymtab
	if open == nil {
		open = func(path string) (symtabFile, error) {
			return openNoPoll(path)
		}
	}
	f, err := open(path)
	if err != nil {
		return transient(err)
	}
	defer f.Close()
	if k, kerr := keyOf(f.Stat()); kerr != nil || k != key {
		return transient(fmt.Errorf("%q changed while being opened", path))
	}
	sym, err := findSymtab(&budgetReaderAt{r: f, left: ef.budgetLeft, mem: mem}, ef.symtab, mem)
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrUnsupported):
		return sym, err
	case errors.Is(err, ErrTransient), errors.Is(err, ErrLimit) && !errors.Is(err, errELFBudget):
		return symInfo{}, err
	case errors.Is(err, errELFBudget), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// More than the budget or the file holds: the file's own answer.
		return symInfo{}, fmt.Errorf("%w (the executable's .symtab could not be read: %w)", ErrNotFound, err)
	}
	return transient(err)
}

// maxELFRead: real objects need far less (libc.so.6 ~200 KiB, big C++ libs a few MiB).
const maxELFRead = 32 << 20

// errELFBudget is about the file (its answer is cached with its facts):
// the resolution goes on without it.
var errELFBudget = fmt.Errorf("%w: ELF file exceeds the read budget", ErrLimit)

// budgetReaderAt also ends the reads of an abandoned resolution.
type budgetReaderAt struct {
	r    io.ReaderAt
	left int64
	mem  *memBudget
}

func (b *budgetReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := b.mem.alive(); err != nil {
		return 0, err
	}
	if int64(len(p)) > b.left {
		return 0, fmt.Errorf("%w (%d MiB)", errELFBudget, maxELFRead>>20)
	}
	b.left -= int64(len(p))
	return b.r.ReadAt(p, off)
}

type cacheEntry struct {
	facts *elfFacts
	err   error
}

func keyOf(fi os.FileInfo, err error) (fileKey, error) {
	if err != nil {
		return fileKey{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, errors.New("no stat_t")
	}
	return fileKey{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtimeNanos: fi.ModTime().UnixNano()}, nil
}

// auxvEntry: a static PIE has neither PT_INTERP nor ET_EXEC, so the
// executable is the module holding AT_ENTRY.
func auxvEntry(procDir string) (uint64, error) {
	b, err := os.ReadFile(procDir + "/auxv")
	if err != nil {
		return 0, err
	}
	const atEntry = 9
	for i := 0; i+16 <= len(b); i += 16 {
		k := binary.NativeEndian.Uint64(b[i:])
		if k == 0 {
			break
		}
		if k == atEntry {
			return binary.NativeEndian.Uint64(b[i+8:]), nil
		}
	}
	return 0, errors.New("no AT_ENTRY")
}

// parseGuarded: a bug in the reader (FuzzParseELF looks for them without
// this) fails the file, not the collector.
func parseGuarded(br *blockReader, size uint64, mem *memBudget) (ef *elfFacts, err error) {
	defer func() {
		if p := recover(); p != nil {
			ef, err = nil, fmt.Errorf("%w: the ELF reader panicked: %v", errNotELF, p)
		}
	}()
	return parseELFWith(br, size, mem)
}
