package tlsvar

import (
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

	"github.com/otelctx/otelctx/internal/scan/remote"
)

// Resolver resolves the variable in processes and caches the facts parsed
// from each ELF file (keyed by device, inode, size and mtime), so that a
// second process running the same binaries costs a maps read and a few
// remote reads. It is safe for concurrent use.
type Resolver struct {
	procRoot string

	mu    sync.Mutex
	cache map[fileKey]cacheEntry

	// openSymtab opens the executable again for the .symtab lookup (nil:
	// the non-blocking open facts uses). Tests inject failures through it.
	openSymtab func(path string) (symtabFile, error)
}

// symtabFile is what the .symtab lookup needs of an opened file.
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

// maxCached bounds the cache; when full it is simply dropped (files are
// re-parsed on next use), which is cheaper than tracking recency.
const maxCached = 4096

// NewResolver returns a Resolver reading procRoot (normally "/proc").
func NewResolver(procRoot string) *Resolver {
	return &Resolver{procRoot: procRoot, cache: map[fileKey]cacheEntry{}}
}

// module is one loaded ELF object of the target.
type module struct {
	path  string
	mm    *moduleMaps
	start uint64 // address of the mapping holding the ELF header
	bias  uint64 // load bias: runtime address = bias + vaddr
	facts *elfFacts
}

// dynAddr is the runtime address of the module's dynamic section, which
// both glibc (l_ld) and musl (dso.dynv) record: it identifies the module in
// the dynamic linker's list regardless of the name it was loaded under.
func (m *module) dynAddr() uint64 { return m.bias + m.facts.dynVaddr }

// Resolve finds otel_thread_ctx_v1 in process pid.
func (r *Resolver) Resolve(pid int) (*Location, error) {
	procDir := r.procRoot + "/" + strconv.Itoa(pid)
	mods, exe, unreadable, err := r.modules(procDir)
	if err != nil {
		return nil, err
	}
	def, sym, table, err := r.definition(procDir, mods, exe)
	if errors.Is(err, ErrNotFound) && unreadable != nil {
		return nil, fmt.Errorf("%w, but some mapped files could not be read: %w", err, unreadable)
	}
	if err != nil {
		return nil, err
	}
	loc := &Location{Arch: def.facts.arch, Module: def.path, ModuleBase: def.bias, SymOffset: sym.value, SymbolTable: table}
	if table == SymbolTableSymtab {
		// Unexported, so nothing outside the executable can name it: its
		// own accesses, relaxed by the linker, are all there is.
		loc.Model = ModelLocalExec
	} else {
		loc.Model = classifyModel(mods, def, exe)
	}
	if loc.Model == ModelLocalDynamic {
		return nil, fmt.Errorf("%w: %s in %s is only accessed through Local Dynamic (module-relative) relocations", ErrUnsupported, SymbolName, def.path)
	}
	if def.facts.tls == nil {
		return nil, fmt.Errorf("%w: %s defines a TLS symbol but has no PT_TLS segment", ErrUnsupported, def.path)
	}
	if err := place(loc, remote.Memory{PID: pid}, mods, def, exe); err != nil {
		return nil, err
	}
	return loc, nil
}

// modules lists the ELF objects mapped in the process and picks the
// executable. unreadable is the first mapped file we were not allowed to
// read: a reader lacking privileges is told so instead of "not found".
func (r *Resolver) modules(procDir string) (mods []*module, exe *module, unreadable, err error) {
	f, err := os.Open(procDir + "/maps")
	if err != nil {
		return nil, nil, nil, err
	}
	ms, err := parseMaps(f)
	f.Close()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s/maps: %w", procDir, err)
	}
	entry, _ := auxvEntry(procDir)
	pageMask := uint64(os.Getpagesize() - 1)
	for _, mm := range groupModules(ms) {
		facts, err := r.facts(procDir, mm)
		if err != nil {
			// Not ELF (data files, memfds): cannot define the variable.
			if unreadable == nil && errors.Is(err, os.ErrPermission) {
				unreadable = err
			}
			continue
		}
		m := &module{path: mm.path, mm: mm, start: mm.first.start, facts: facts}
		m.bias = mm.first.start - (facts.minLoad &^ pageMask)
		mods = append(mods, m)
		if exe == nil && entry != 0 {
			for _, x := range mm.mappings {
				if entry >= x.start && entry < x.end {
					exe = m
				}
			}
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
	return mods, exe, unreadable, nil
}

// definition returns the module defining the variable, its symbol and the
// table it was found in.
func (r *Resolver) definition(procDir string, mods []*module, exe *module) (*module, symInfo, string, error) {
	def, err := pickDefinition(mods, exe)
	sym, table := symInfo{}, SymbolTableDynsym
	if def != nil {
		sym = def.facts.sym
	}
	if errors.Is(err, ErrNotFound) && exe != nil {
		// Not exported (a plain -static executable has no .dynsym at all):
		// the executable's own .symtab, if not stripped, still names it.
		if sym, err = r.symtabSym(procDir, exe); err == nil {
			def, table = exe, SymbolTableSymtab
		}
	}
	return def, sym, table, err
}

// place fills in loc's libc and placement from the dynamic linker's
// structures (or, for a static executable, its fixed TLS layout).
func place(loc *Location, mem remote.Memory, mods []*module, def, exe *module) error {
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
		// A static executable: its TLS is module 1 at a fixed offset, with
		// or without a dynamic linker's structures (a static glibc exports
		// _r_debug with --export-dynamic, but nothing needs them here).
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
	return fmt.Errorf("%w: %s is in a shared object but no glibc or musl dynamic linker is loaded", ErrUnsupported, def.path)
}

func defined(s symInfo) bool { return s.found && s.shndx != elf.SHN_UNDEF }

// pickDefinition returns the module whose definition the dynamic linker
// binds references to: the executable's if it has one (it comes first in
// the global scope), else the first loaded module defining it. Invalid
// definitions are reported only when there is no valid one.
func pickDefinition(mods []*module, exe *module) (*module, error) {
	var valid []*module
	var reasons []string
	for _, m := range mods {
		s := m.facts.sym
		if !s.found {
			continue
		}
		if why := symProblem(s); why != "" {
			reasons = append(reasons, m.path+": "+why)
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

// symProblem says why a .dynsym entry cannot be the OTEP 4947 variable.
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

// classifyModel looks at the relocations naming the symbol in every loaded
// module. The model is informative (placement decides how to read), except
// that Local Dynamic is refused as OTEP 4947 allows.
func classifyModel(mods []*module, def, exe *module) Model {
	var all tlsRelocs
	for _, m := range mods {
		r := m.facts.relocs
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
	case def.facts.relocs.dtpmodLocal:
		return ModelLocalDynamic
	}
	return ModelUnknown
}

// facts returns the parsed facts for a module's file. The file is stat'ed
// first (no open: mapped device nodes must not be opened, and a cached file
// costs no open at all); only regular files whose inode is the mapping's
// are parsed. Results, including "not ELF", are cached per (device, inode,
// size, mtime).
func (r *Resolver) facts(procDir string, mm *moduleMaps) (*elfFacts, error) {
	path, key, err := statModule(procDir, mm)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	ce, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return ce.facts, ce.err
	}
	// O_NONBLOCK: the path is the target's; if a FIFO replaced the file
	// since the stat, a plain open would block this goroutine until a
	// writer comes. Non-blocking, it opens at once and fails the check.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file when opened", path)
	}
	if k, err := keyOf(fi, nil); err != nil || k != key {
		return nil, fmt.Errorf("%s changed while being opened", path)
	}
	// debug/elf reads whole sections, sized by the file's headers: a sparse
	// file can claim gigabytes at no cost to the target. The budget bounds
	// what one file can make the reader read (and allocate).
	br := &budgetReaderAt{r: f, left: maxELFRead}
	ef, err := parseELF(br)
	if ef != nil {
		ef.key, ef.budgetLeft = key, br.left
	}
	r.mu.Lock()
	if len(r.cache) >= maxCached {
		r.cache = map[fileKey]cacheEntry{}
	}
	r.cache[key] = cacheEntry{facts: ef, err: err}
	r.mu.Unlock()
	return ef, err
}

// symtabSym looks the variable up in the executable's .symtab, once per
// file version: the answer is kept in its facts, which every process
// running that file shares, so only answers about the file itself are kept
// (found; no such symbol, or stripped; ambiguous; a table the file cannot
// hold within its budget or size). A failure to open or read it (the
// process exited mid-resolve, out of descriptors, an I/O error) says
// nothing about the file: it is returned as ErrTransient, not kept, and
// the next resolution reads the table again. The file is opened again the
// way facts opens it, and the read counts against what parsing left of the
// file's budget.
func (r *Resolver) symtabSym(procDir string, exe *module) (symInfo, error) {
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
		sym, err = r.readSymtab(procDir, exe.mm, ef)
	}
	if errors.Is(err, ErrTransient) {
		return symInfo{}, err
	}
	r.mu.Lock()
	ef.symtabDone, ef.symtabSym, ef.symtabErr = true, sym, err
	r.mu.Unlock()
	return sym, err
}

// readSymtab reads the executable's .symtab. Errors are ErrNotFound or
// ErrUnsupported when they are the file's (see symtabSym), else
// ErrTransient.
func (r *Resolver) readSymtab(procDir string, mm *moduleMaps, ef *elfFacts) (symInfo, error) {
	transient := func(err error) (symInfo, error) {
		return symInfo{}, fmt.Errorf("%w: the executable's .symtab could not be read: %w", ErrTransient, err)
	}
	path, key, err := statModule(procDir, mm)
	if err != nil {
		return transient(err)
	}
	if key != ef.key {
		// Another version of the file: these facts are not its.
		return transient(fmt.Errorf("%s changed since it was parsed", path))
	}
	open := r.openSymtab
	if open == nil {
		open = func(path string) (symtabFile, error) {
			return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		}
	}
	f, err := open(path)
	if err != nil {
		return transient(err)
	}
	defer f.Close()
	if k, kerr := keyOf(f.Stat()); kerr != nil || k != key {
		return transient(fmt.Errorf("%s changed while being opened", path))
	}
	sym, err := findSymtab(&budgetReaderAt{r: f, left: ef.budgetLeft}, ef.symtab)
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrUnsupported):
		return sym, err
	case errors.Is(err, errELFBudget), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// The headers claim more than the budget allows or than the file
		// (this version of it, checked above) holds: the file's own answer.
		return symInfo{}, fmt.Errorf("%w (the executable's .symtab could not be read: %w)", ErrNotFound, err)
	}
	return transient(err)
}

// maxELFRead bounds the bytes read from one ELF file: headers, section
// names, .dynsym, .dynstr, .rela.dyn and the dynamic section. Real objects
// need far less (glibc's libc.so.6: ~200 KiB of them; large C++ libraries a
// few MiB).
const maxELFRead = 32 << 20

// errELFBudget: a file asked for more than maxELFRead bytes.
var errELFBudget = errors.New("ELF file exceeds the read budget")

// budgetReaderAt fails reads once left bytes have been read in all.
type budgetReaderAt struct {
	r    io.ReaderAt
	left int64
}

func (b *budgetReaderAt) ReadAt(p []byte, off int64) (int, error) {
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

// statModule finds a path to the mapped file itself: map_files (works for
// deleted files and across mount namespaces, needs CAP_SYS_ADMIN), else the
// path under the process's root (containers). The inode must be the
// mapping's and the file regular.
func statModule(procDir string, mm *moduleMaps) (string, fileKey, error) {
	path := strings.TrimSuffix(mm.path, " (deleted)")
	var firstErr error
	for _, c := range []string{
		fmt.Sprintf("%s/map_files/%x-%x", procDir, mm.first.start, mm.first.end),
		procDir + "/root" + path,
	} {
		fi, err := os.Stat(c)
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s: not a regular file", c)
		}
		var key fileKey
		if err == nil {
			key, err = keyOf(fi, nil)
		}
		if err == nil && key.ino != mm.inode {
			err = fmt.Errorf("%s: not the mapped file (inode differs)", c)
		}
		if err == nil {
			return c, key, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", fileKey{}, firstErr
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

// auxvEntry returns AT_ENTRY from /proc/PID/auxv: the executable is the
// module whose mapping holds its entry point (static-pie executables have
// neither PT_INTERP nor ET_EXEC to tell them from libraries).
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
