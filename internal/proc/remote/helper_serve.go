// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/signal"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The reader helper's side (helper.go): this package's init runs before
// the program's main, so the executable, started with helperEnv, serves
// reads and exits without starting anything else.
func init() {
	if os.Getenv(helperEnv) != helperValue {
		return
	}
	nameThreads("otelctx-reader")
	// It ends when its control socket does: a Ctrl-C or a unit's SIGTERM
	// to the whole group must not cut the reads of a collector that is
	// still shutting down.
	signal.Ignore(unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	if err := serveConnections(helperFD); err != nil {
		os.Stderr.WriteString("otelctx memory reader: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// nameThreads names every thread of the helper (the runtime's threads
// started before init; later ones inherit a name from one of them), so
// that the thread a hung read holds says whose it is.
func nameThreads(name string) {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		_ = os.WriteFile("/proc/self/task/"+t.Name()+"/comm", []byte(name), 0)
	}
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

// serveConnections receives connections on the control socket ctl and
// serves each on its own goroutine, until ctl ends: this program's end
// closed it, or went away.
func serveConnections(ctl int) error {
	oob := make([]byte, unix.CmsgSpace(4))
	var b [1]byte
	for {
		n, oobn, _, _, err := unix.Recvmsg(ctl, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return nil
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return errBadRequest
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			return errBadRequest
		}
		go serveReads(os.NewFile(uintptr(fds[0]), "memory reader connection"))
	}
}

// serveReads answers the requests of one connection in turn until it
// ends; a read that hangs holds up that connection only, whose worker
// waits for it anyway.
func serveReads(f *os.File) {
	defer f.Close()
	// One thread per connection, named to the collector first: at a
	// deadline it tells a read asleep in the kernel (the target's doing)
	// from one not yet run (the host's).
	runtime.LockOSThread()
	var hello [4]byte
	binary.NativeEndian.PutUint32(hello[:], uint32(unix.Gettid()))
	if _, err := f.Write(hello[:]); err != nil {
		return
	}
	rd := bufio.NewReaderSize(f, 64<<10)
	for {
		req, err := readRequest(rd)
		if err != nil {
			return
		}
		if _, err := f.Write(req.serve()); err != nil {
			return
		}
	}
}

type request struct {
	id, pid uint32
	each    bool
	addrs   []uint64
	lens    []uint64
}

var errBadRequest = errors.New("malformed request")

// readRequest reads one request, bounded by maxRequestRanges and
// maxRequestBytes.
func readRequest(rd *bufio.Reader) (*request, error) {
	var hdr [requestHeader]byte
	if _, err := io.ReadFull(rd, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.NativeEndian.Uint32(hdr[0:])
	n := binary.NativeEndian.Uint32(hdr[16:])
	if n > maxRequestRanges || uint64(size) != uint64(requestHeader-4)+uint64(n)*rangeSize {
		return nil, errBadRequest
	}
	r := &request{
		id:    binary.NativeEndian.Uint32(hdr[4:]),
		pid:   binary.NativeEndian.Uint32(hdr[8:]),
		each:  binary.NativeEndian.Uint32(hdr[12:]) == 1,
		addrs: make([]uint64, n),
		lens:  make([]uint64, n),
	}
	var total uint64
	var rng [rangeSize]byte
	for i := range r.addrs {
		if _, err := io.ReadFull(rd, rng[:]); err != nil {
			return nil, err
		}
		r.addrs[i] = binary.NativeEndian.Uint64(rng[0:])
		r.lens[i] = binary.NativeEndian.Uint64(rng[8:])
		if r.lens[i] > maxRequestBytes-total {
			return nil, errBadRequest
		}
		total += r.lens[i]
	}
	if !r.each && n != 1 {
		return nil, errBadRequest
	}
	return r, nil
}

// serve makes the system calls and returns the reply.
func (r *request) serve() []byte {
	n := len(r.addrs)
	var total uint64
	for _, l := range r.lens {
		total += l
	}
	out := make([]byte, replyHeader+uint64(n)+total)
	data := out[replyHeader+n:]
	bufs := make([][]byte, n)
	off := uint64(0)
	for i, l := range r.lens {
		bufs[i] = data[off : off+l : off+l]
		off += l
	}
	ok := make([]bool, n)
	kind, errno, index, calls, got := uint32(replyOK), uint32(0), uint32(0), uint32(0), uint64(0)
	if r.each {
		c, e, i := rawReadEachErrno(int(r.pid), bufs, r.addrs, ok)
		calls = uint32(c)
		if e != 0 {
			kind, errno, index = replyErrno, uint32(e), uint32(i)
		}
	} else if len(bufs[0]) > 0 {
		nr, e := rawReadAtErrno(int(r.pid), bufs[0], r.addrs[0])
		calls = 1
		switch {
		case e != 0:
			kind, errno = replyErrno, uint32(e)
		case nr != len(bufs[0]):
			kind, got = replyShort, uint64(nr)
		default:
			ok[0] = true
		}
	}
	for i, v := range ok {
		if v {
			out[replyHeader+i] = 1
		}
	}
	binary.NativeEndian.PutUint32(out[0:], uint32(len(out)-4))
	binary.NativeEndian.PutUint32(out[4:], r.id)
	binary.NativeEndian.PutUint32(out[8:], kind)
	binary.NativeEndian.PutUint32(out[12:], errno)
	binary.NativeEndian.PutUint32(out[16:], index)
	binary.NativeEndian.PutUint32(out[20:], calls)
	binary.NativeEndian.PutUint64(out[24:], got)
	return out
}
