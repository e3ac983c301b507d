// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountGuard names what of the process's mount namespace is never touched:
// a FUSE file waits for its server (which the process may run itself) on
// any stat, open or read, and overlayfs may stack over FUSE.
type mountGuard struct {
	fuseDevs map[string]bool // as /proc/PID/maps writes them
	fuse     map[uint64]bool // mount IDs
	overlay  map[uint64]bool
	known    map[uint64]bool
}

// mountCost is what one mountinfo line adds to the guard's maps.
const mountCost = 96

func readMountGuard(procDir string, mem *memBudget) (*mountGuard, error) {
	f, err := os.Open(procDir + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := &mountGuard{fuseDevs: map[string]bool{}, fuse: map[uint64]bool{}, overlay: map[uint64]bool{}, known: map[uint64]bool{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// "36 35 98:0 /mnt1 /mnt2 rw master:1 - fuse.sshfs src rw"
		line := sc.Text()
		fields := strings.Fields(line)
		sep := strings.Index(line, " - ")
		if len(fields) < 3 || sep < 0 {
			continue
		}
		id, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if err := mem.take(mountCost); err != nil {
			return nil, err
		}
		g.known[id] = true
		rest := strings.Fields(line[sep+3:])
		switch {
		case len(rest) == 0:
		case isFUSE(rest[0]):
			g.fuse[id] = true
			if d, ok := mapsDev(fields[2]); ok {
				if err := mem.take(len(d) + mountCost); err != nil {
					return nil, err
				}
				g.fuseDevs[d] = true
			}
		case rest[0] == "overlay":
			g.overlay[id] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s/mountinfo: %w", procDir, err)
	}
	return g, nil
}

var errGuardedMount = errors.New("on a FUSE mount, an overlay in a namespace with FUSE mounts, or a mount the process does not list")

// check refuses a file on a mount a read could block on. Overlays are read
// only where the namespace lists no FUSE mount.
func (g *mountGuard) check(mntID uint64) error {
	if g == nil {
		return nil
	}
	if g.fuse[mntID] || !g.known[mntID] || (g.overlay[mntID] && len(g.fuse) > 0) {
		return errGuardedMount
	}
	return nil
}

// statNoSync asks the file system nothing (AT_STATX_DONT_SYNC: FUSE answers
// from its cache, without a request to its server).
func statNoSync(fd int) (unix.Statx_t, error) {
	var st unix.Statx_t
	err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC,
		unix.STATX_TYPE|unix.STATX_INO|unix.STATX_SIZE|unix.STATX_MTIME|unix.STATX_MNT_ID, &st)
	return st, err
}

// moduleFile is a module's file opened O_PATH (no open reached its file
// system yet): every check is made on this fd, and reads reopen the same
// file through it.
type moduleFile struct {
	fd  int
	key fileKey
}

func (m *moduleFile) Close() { unix.Close(m.fd) }

// path reopens the checked file (the same inode, whatever the names do now).
func (m *moduleFile) path() string { return "/proc/self/fd/" + strconv.Itoa(m.fd) }

// openModule prefers map_files (deleted files, other mount namespaces; needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else the path resolved inside the
// process's root, following no symbolic link and crossing no mount.
func openModule(procDir string, mm *moduleMaps, g *mountGuard) (*moduleFile, error) {
	var firstErr error
	for _, open := range []func() (int, string, error){
		func() (int, string, error) {
			c := fmt.Sprintf("%s/map_files/%x-%x", procDir, mm.first.start, mm.first.end)
			fd, err := unix.Open(c, unix.O_PATH|unix.O_CLOEXEC, 0)
			return fd, c, err
		},
		func() (int, string, error) { return openInRoot(procDir, mm, g) },
	} {
		fd, name, err := open()
		var m *moduleFile
		if err == nil {
			m, err = checkModule(fd, name, mm, g)
		} else {
			err = &os.PathError{Op: "open", Path: name, Err: err}
		}
		if err == nil {
			return m, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

func openInRoot(procDir string, mm *moduleMaps, g *mountGuard) (int, string, error) {
	path := strings.TrimSuffix(mm.path, " (deleted)")
	root, err := unix.Open(procDir+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, procDir + "/root", err
	}
	defer unix.Close(root)
	// The walk looks names up on the root's file system: not on a guarded one.
	st, err := statNoSync(root)
	if err == nil {
		err = g.check(st.Mnt_id)
	}
	if err != nil {
		return -1, procDir + "/root", err
	}
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	return fd, procDir + "/root" + path, err
}

func checkModule(fd int, name string, mm *moduleMaps, g *mountGuard) (*moduleFile, error) {
	st, err := statNoSync(fd)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%q: not a regular file", name)
	case st.Ino != mm.inode:
		err = fmt.Errorf("%q: not the mapped file (inode differs)", name)
	default:
		if gerr := g.check(st.Mnt_id); gerr != nil {
			err = fmt.Errorf("%q: %w", name, gerr)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	key := fileKey{
		dev:        unix.Mkdev(st.Dev_major, st.Dev_minor),
		ino:        st.Ino,
		size:       int64(st.Size),
		mtimeNanos: st.Mtime.Sec*1e9 + int64(st.Mtime.Nsec),
	}
	return &moduleFile{fd: fd, key: key}, nil
}
