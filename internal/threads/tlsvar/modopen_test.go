// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The module is found by the path the process maps only inside its root and
// through no symbolic link: a publisher that swaps its file for a link (to a
// FIFO, a FUSE file, another process's file) gets no resolution.
func TestModuleSymlinkRefused(t *testing.T) {
	procRoot := t.TempDir()
	exe := buildStaticExe(t, []symtabEntry{
		{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 1, value: 8},
	})
	fakeProc(t, procRoot, 1, exe)
	if _, err := NewResolver(procRoot).Resolve(1); err != nil {
		t.Fatalf("the file itself: %v", err)
	}
	// The same file (same inode, so the mapping's check passes) behind a link.
	root := filepath.Join(procRoot, "1", "root")
	if err := os.Rename(filepath.Join(root, "exe"), filepath.Join(root, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "exe")); err != nil {
		t.Fatal(err)
	}
	if loc, err := NewResolver(procRoot).Resolve(1); err == nil {
		t.Fatalf("resolved through a symbolic link: %v", loc)
	}
}

func TestMountGuard(t *testing.T) {
	dir := t.TempDir()
	info := "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"2 1 0:40 / /mnt/f rw - fuse.sshfs src rw\n" +
		"3 1 0:41 / /c rw - overlay overlay rw,lowerdir=/mnt/f\n"
	if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := readMountGuard(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !g.fuseDevs["00:28"] {
		t.Errorf("FUSE devices %v, want 00:28", g.fuseDevs)
	}
	for id, refused := range map[uint64]bool{1: false, 2: true, 3: true, 99: true} {
		if err := g.check(id); (err != nil) != refused || (err != nil && !errors.Is(err, errGuardedMount)) {
			t.Errorf("mount %d: %v, want refused=%v", id, err, refused)
		}
	}
	// Without a FUSE mount in the namespace an overlay (a container's root) is read.
	delete(g.fuse, 2)
	if err := g.check(3); err != nil {
		t.Errorf("overlay without FUSE: %v", err)
	}
}
