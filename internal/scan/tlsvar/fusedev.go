package tlsvar

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fuseDevices lists the devices (as /proc/PID/maps writes them, "fd:01") of
// the process's FUSE mounts. Any touch of a FUSE file (stat, open, read) waits
// for its server, which the process may run itself: modules there are not
// looked at.
func fuseDevices(procDir string) (map[string]bool, error) {
	f, err := os.Open(procDir + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	devs := map[string]bool{}
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
		rest := strings.Fields(line[sep+3:])
		if len(rest) == 0 || !isFUSE(rest[0]) {
			continue
		}
		if d, ok := mapsDev(fields[2]); ok {
			devs[d] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s/mountinfo: %w", procDir, err)
	}
	return devs, nil
}

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
