// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Initramfs is an initramfs being assembled: files by their absolute path
// in the guest, written as one uncompressed newc cpio archive (what the
// kernel unpacks from -initrd), parent directories first.
type Initramfs struct {
	files map[string]entry
}

type entry struct {
	mode uint32 // type and permission bits (S_IFREG, S_IFDIR, S_IFLNK)
	src  string // a host file to copy, for regular files without data
	data []byte // contents, or a symlink's target
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

func NewInitramfs() *Initramfs { return &Initramfs{files: map[string]entry{}} }

// AddFile copies the host file src to the guest path dst with mode perm.
func (r *Initramfs) AddFile(dst, src string, perm uint32) {
	r.add(dst, entry{mode: sIFREG | perm, src: src})
}

// AddData writes data to the guest path dst.
func (r *Initramfs) AddData(dst string, data []byte, perm uint32) {
	r.add(dst, entry{mode: sIFREG | perm, data: data})
}

// AddSymlink makes dst a symbolic link to target.
func (r *Initramfs) AddSymlink(dst, target string) {
	r.add(dst, entry{mode: sIFLNK | 0o777, data: []byte(target)})
}

// AddDir creates the directory dst (and its parents).
func (r *Initramfs) AddDir(dst string) { r.AddDirPerm(dst, 0o755) }

// AddDirPerm creates the directory dst with perm (0o1777 for /tmp).
func (r *Initramfs) AddDirPerm(dst string, perm uint32) { r.add(dst, entry{mode: sIFDIR | perm}) }

func (r *Initramfs) add(dst string, e entry) {
	dst = path.Clean("/" + dst)
	for d := path.Dir(dst); d != "/"; d = path.Dir(d) {
		if _, ok := r.files[d]; !ok {
			r.files[d] = entry{mode: sIFDIR | 0o755}
		}
	}
	r.files[dst] = e
}

// Write writes the archive to the host file out.
func (r *Initramfs) Write(out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	// Sorted paths put each directory before what it holds.
	sort.Strings(names)
	ino := uint32(1)
	for _, n := range names {
		if err := writeEntry(w, ino, strings.TrimPrefix(n, "/"), r.files[n]); err != nil {
			f.Close()
			return fmt.Errorf("initramfs %s: %w", n, err)
		}
		ino++
	}
	if err := writeHeader(w, 0, "TRAILER!!!", 0, 0); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeEntry(w *bufio.Writer, ino uint32, name string, e entry) error {
	data := e.data
	if e.src != "" {
		b, err := os.ReadFile(e.src)
		if err != nil {
			return err
		}
		data = b
	}
	if err := writeHeader(w, ino, name, e.mode, len(data)); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return pad(w, len(data))
}

// writeHeader: the newc header (13 hex fields after the magic), the name
// with its NUL, padded to 4 bytes.
func writeHeader(w io.Writer, ino uint32, name string, mode uint32, size int) error {
	nlink := 1
	if mode&sIFDIR != 0 {
		nlink = 2
	}
	_, err := fmt.Fprintf(w, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%s\x00",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0, name)
	if err != nil {
		return err
	}
	return pad(w, 110+len(name)+1)
}

func pad(w io.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
