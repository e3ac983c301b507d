// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func isFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// mapsDev turns mountinfo's decimal "major:minor" into maps' hex form.
func mapsDev(s string) (string, bool) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return "", false
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return "", false
	}
	return fmt.Sprintf("%02x:%02x", a, b), true
}

// openNoPoll opens path read-only without registering it with the Go
// runtime's poller: registration polls the file, and a FUSE server that does
// not answer would hold a thread the garbage collector waits for.
func openNoPoll(path string) (*os.File, error) {
	// O_NONBLOCK: a FIFO swapped in since the stat would block the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// Blocking again, so os.NewFile leaves it out of the poller.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
