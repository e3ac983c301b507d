// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package testfuse is a FUSE file system for tests whose reads block until
// the test says so: it serves one regular file and holds every READ
// request until Release, so that a page fault on a mapping of the file (by
// any process, or by process_vm_readv of another process's mapping) waits
// for the test. It speaks the kernel protocol over /dev/fuse itself.
//
// A FUSE server must never live in a process that can block on it unless
// something outside that process aborts the connection when it dies: a
// thread waiting for a READ that its server has taken cannot be killed,
// and the dying process never answers or closes the device again. This
// package's server lives in the test process because each mount is
// guarded by a watchdog process (watchdog.go) that aborts the connection
// through fusectl as soon as the test process is dying. A server written
// any other way belongs in a process that never touches the file.
// userfaultfd needs no such rule: a process_vm_readv waiting on a
// userfaultfd page is killable.
package testfuse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// FileName is the name of the one file, in the mount's root.
const FileName = "file"

// ReadRequest is a READ the kernel sent: the range and the thread that
// caused it (the task whose fault or read(2) waits for the answer), with
// its process (0 if it could not be told) and that thread's name. Any
// process on the host may fault the file in, not only the test's: a
// host-wide profiler reads every sampled process's mappings with
// process_vm_readv.
type ReadRequest struct {
	Offset uint64
	Size   uint32
	TID    int
	PID    int
	Comm   string
}

// FS is a mounted file system serving one file.
type FS struct {
	tb      testing.TB
	dir     string
	content []byte
	uid     uint32
	gid     uint32
	dev     *os.File
	conn    uint32        // the connection's number in fusectl
	guard   *watchdog     // aborts the connection if the test process dies
	done    chan struct{} // closed when the serve loop has returned
	err     error         // why it returned, read after done

	mu       sync.Mutex
	released bool
	closed   bool
	aborted  bool // at the test deadline
	pending  []pending
	reads    []ReadRequest
	readCh   chan ReadRequest
	timer    *time.Timer
	// after: READs received from now on are answered after it (0: held
	// until Release).
	after time.Duration
}

type pending struct {
	unique uint64
	req    ReadRequest
}

// Mount mounts a file system at a new temporary directory serving content
// as FileName; it is unmounted, and every blocked read fails, when the test
// ends. Without /dev/fuse or the right to mount, the test skips (fails
// under CI=true).
func Mount(tb testing.TB, content []byte) *FS {
	tb.Helper()
	dir := tb.TempDir()
	// Non-blocking, so that the serve loop's read waits in Go's poller
	// and Close can interrupt it (a blocked read(2) would hold the device
	// open, and with it the connection).
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		testenv.Missing(tb, "cannot open /dev/fuse ("+err.Error()+")")
	}
	fs := &FS{
		tb: tb, dir: dir, content: content,
		uid: uint32(os.Getuid()), gid: uint32(os.Getgid()),
		done:   make(chan struct{}),
		readCh: make(chan ReadRequest, 64),
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other", fd, fs.uid, fs.gid)
	if err := unix.Mount("testfuse", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		testenv.Missing(tb, "cannot mount a FUSE file system ("+err.Error()+")")
	}
	// Only now: the device polls (Go's poller takes it) once it belongs
	// to a connection.
	fs.dev = os.NewFile(uintptr(fd), "/dev/fuse")
	go fs.serve()
	tb.Cleanup(fs.Close)
	fs.closeBeforeDeadline(tb)
	if err := fs.guardConnection(); err != nil {
		fs.Close()
		testenv.Missing(tb, "cannot guard the FUSE connection against this process's death ("+err.Error()+")")
	}
	if err := fs.refusePoll(); err != nil {
		tb.Fatalf("testfuse: %v", err)
	}
	return fs
}

// guardConnection has the process's watchdog abort the connection should
// this process die while it holds a READ (see watchdog.go); it needs
// fusectl, which it mounts if it must.
func (fs *FS) guardConnection() error {
	conn, err := connectionOf(fs.dir)
	if err != nil {
		return err
	}
	if err := requireAbortFile(conn); err != nil {
		return err
	}
	w, err := getWatchdog()
	if err != nil {
		return err
	}
	if err := w.guard(conn, fs.dir); err != nil {
		return err
	}
	fs.mu.Lock()
	fs.conn, fs.guard = conn, w
	fs.mu.Unlock()
	return nil
}

// Connection is the connection's number: its directory in ConnectionsDir.
func (fs *FS) Connection() uint32 { return fs.conn }

// deadlineMargin is how long before the test binary's -timeout the file
// system aborts itself.
const deadlineMargin = 5 * time.Second

// closeBeforeDeadline aborts the connection shortly before the test binary
// times out. A process cannot exit while one of its threads waits for a
// READ held by a server in the same process (the wait is uninterruptible
// and the server dies first), so a timeout panic would leave it hanging.
func (fs *FS) closeBeforeDeadline(tb testing.TB) {
	d, ok := tb.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return
	}
	deadline, ok := d.Deadline()
	if !ok {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.timer = time.AfterFunc(time.Until(deadline)-deadlineMargin, fs.abort)
}

// abort closes the device (as Close does, without waiting for anything
// else): every held request fails.
func (fs *FS) abort() {
	fs.mu.Lock()
	closed := fs.closed
	fs.aborted = true
	fs.mu.Unlock()
	if !closed {
		fs.dev.Close()
	}
}

// refusePoll has the kernel ask the server once whether the file polls,
// and learn that it does not. Go's os.Open adds every file to the
// runtime's epoll with a raw system call, which for a FUSE file waits for
// the server's answer to POLL: the next stop-the-world would wait for that
// thread, and the server goroutine for the stop-the-world. Once POLL got
// ENOSYS the kernel no longer asks.
func (fs *FS) refusePoll() error {
	fd, err := unix.Open(fs.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(ep)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	// Not unix.EpollCtl, a raw system call: a goroutine waiting in one
	// holds up the garbage collector's stop-the-world, and with it the
	// server goroutine that would answer.
	_, _, errno := syscall.Syscall6(unix.SYS_EPOLL_CTL, uintptr(ep), unix.EPOLL_CTL_ADD, uintptr(fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	if errno != 0 && errno != unix.EPERM {
		return fmt.Errorf("epoll of %s: %w", fs.Path(), errno)
	}
	return nil
}

// MapUntouched maps the whole file, read-only and shared, without touching
// a page of it; the mapping goes at the end of the test, after Close (a
// fault still held would keep munmap waiting).
func (fs *FS) MapUntouched() []byte {
	fs.tb.Helper()
	f, err := os.Open(fs.Path())
	if err != nil {
		fs.tb.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, len(fs.content), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fs.tb.Fatal(err)
	}
	fs.tb.Cleanup(func() {
		fs.Close()
		if err := unix.Munmap(m); err != nil {
			fs.tb.Error(err)
		}
	})
	return m
}

// Path is the file's path.
func (fs *FS) Path() string { return filepath.Join(fs.dir, FileName) }

// Dir is the mount point.
func (fs *FS) Dir() string { return fs.dir }

// Content is what the file holds.
func (fs *FS) Content() []byte { return fs.content }

// ReadReceived delivers each READ request as it arrives (64 are buffered;
// later ones are still counted by Reads).
func (fs *FS) ReadReceived() <-chan ReadRequest { return fs.readCh }

// Reads returns every READ request received so far.
func (fs *FS) Reads() []ReadRequest {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]ReadRequest(nil), fs.reads...)
}

// ReadsBy returns the READ requests received so far from the processes
// pids, and those whose process could not be told.
func (fs *FS) ReadsBy(pids ...int) []ReadRequest {
	var by []ReadRequest
	for _, r := range fs.Reads() {
		if r.PID == 0 || slices.Contains(pids, r.PID) {
			by = append(by, r)
		}
	}
	return by
}

// Pending is the number of READ requests held, unanswered.
func (fs *FS) Pending() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.pending)
}

// Release answers every held READ and every later one at once.
func (fs *FS) Release() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.released = true
	for _, p := range fs.pending {
		fs.answerRead(p)
	}
	fs.pending = nil
}

// AnswerAfter has every READ received from now on answered d after it
// arrived, as a slow file system would (d <= 0: held until Release again,
// the default). The reads held already stay held. A thread faulting on the
// file then holds what it holds (its process's mmap lock, for a read of
// its own memory through /proc/self/mem) for d at each new page.
func (fs *FS) AnswerAfter(d time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.after = max(d, 0)
}

// answerHeld answers the held READ unique, if it is still held (not
// answered by Release, nor dropped by Close).
func (fs *FS) answerHeld(unique uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return
	}
	i := slices.IndexFunc(fs.pending, func(p pending) bool { return p.unique == unique })
	if i < 0 {
		return
	}
	p := fs.pending[i]
	fs.pending = slices.Delete(fs.pending, i, i+1)
	fs.answerRead(p)
}

// Close aborts the connection (every waiting request fails, a blocked page
// fault with it), unmounts (lazily: a process may still map the file) and
// waits for the serve loop. It is idempotent.
func (fs *FS) Close() {
	fs.mu.Lock()
	if fs.closed {
		fs.mu.Unlock()
		return
	}
	fs.closed = true
	fs.pending = nil
	if fs.timer != nil {
		fs.timer.Stop()
	}
	aborted, guard := fs.aborted, fs.guard
	fs.mu.Unlock()
	select {
	case <-fs.done:
		if !aborted {
			fs.tb.Errorf("testfuse: the server stopped before Close: %v", fs.err)
		}
	default:
	}
	// Closing the last descriptor of the device aborts the connection.
	fs.dev.Close()
	<-fs.done
	if guard != nil {
		if err := guard.unguard(fs.conn); err != nil {
			fs.tb.Errorf("testfuse: %v", err)
		}
	}
	// EINVAL: the abort may already have detached it.
	if err := unix.Unmount(fs.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		fs.tb.Errorf("testfuse: unmount %s: %v", fs.dir, err)
	}
}

// serve answers requests until the device is closed or the connection is
// gone (unmounted).
func (fs *FS) serve() {
	defer close(fs.done)
	buf := make([]byte, bufSize)
	for {
		n, err := fs.dev.Read(buf)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ENOENT):
			// ENOENT: a request interrupted before it was read.
			continue
		case err != nil:
			fs.err = err // closed, or ENODEV once unmounted
			return
		}
		h, ok := parseInHeader(buf[:n])
		if !ok {
			continue
		}
		fs.handle(h, buf[inHeaderSize:n])
	}
}

// handle answers one request.
func (fs *FS) handle(h inHeader, body []byte) {
	const (
		dirMode  = unix.S_IFDIR | 0o755
		fileMode = unix.S_IFREG | 0o444
	)
	size := uint64(len(fs.content))
	switch h.opcode {
	case opForget, opBatchForget:
		// No reply.
	case opInit:
		var ra uint32
		if len(body) >= 12 {
			ra = binary.NativeEndian.Uint32(body[8:])
		}
		fs.write(reply(h.unique, 0, initOut(ra)))
	case opLookup:
		name, _, _ := strings.Cut(string(body), "\x00")
		if h.nodeid != rootID || name != FileName {
			fs.write(reply(h.unique, unix.ENOENT, nil))
			return
		}
		fs.write(reply(h.unique, 0, entryOut(fileID, size, fileMode, fs.uid, fs.gid)))
	case opGetattr:
		if h.nodeid == rootID {
			fs.write(reply(h.unique, 0, attrOut(rootID, 0, dirMode, fs.uid, fs.gid)))
			return
		}
		fs.write(reply(h.unique, 0, attrOut(fileID, size, fileMode, fs.uid, fs.gid)))
	case opOpen:
		if h.nodeid != fileID {
			fs.write(reply(h.unique, unix.EISDIR, nil))
			return
		}
		fs.write(reply(h.unique, 0, openOut()))
	case opRelease, opFlush:
		fs.write(reply(h.unique, 0, nil))
	case opRead:
		fs.read(h, body)
	case opInterrupt:
		// The interrupted READ stays held: a reader that must not block
		// is what the tests look for, and Close ends it.
	default: // GETXATTR, ACCESS, STATFS, OPENDIR, ...
		fs.write(reply(h.unique, unix.ENOSYS, nil))
	}
}

// read records a READ and holds it until Release (or for AnswerAfter's
// delay).
func (fs *FS) read(h inHeader, body []byte) {
	if len(body) < 20 {
		fs.write(reply(h.unique, unix.EINVAL, nil))
		return
	}
	p := pending{unique: h.unique, req: ReadRequest{
		Offset: binary.NativeEndian.Uint64(body[8:]),
		Size:   binary.NativeEndian.Uint32(body[16:]),
		TID:    int(h.pid),
	}}
	p.req.PID, p.req.Comm = requester(p.req.TID)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.reads = append(fs.reads, p.req)
	select {
	case fs.readCh <- p.req:
	default:
	}
	if fs.released {
		fs.answerRead(p)
		return
	}
	fs.pending = append(fs.pending, p)
	if fs.after > 0 {
		time.AfterFunc(fs.after, func() { fs.answerHeld(p.unique) })
	}
}

// answerRead replies with the file's bytes in the range (fewer at its end).
func (fs *FS) answerRead(p pending) {
	off := min(p.req.Offset, uint64(len(fs.content)))
	end := min(off+uint64(p.req.Size), uint64(len(fs.content)))
	fs.write(reply(p.unique, 0, fs.content[off:end]))
}

// write sends one reply; an error means the request is gone (interrupted,
// or the connection aborted), which the kernel has already handled.
func (fs *FS) write(b []byte) {
	_, _ = fs.dev.Write(b)
}

// requester returns the process and name of the thread tid, read while it
// waits for the answer (so it is still there); the status file does not
// take the lock of the address space whose fault may be waiting.
func requester(tid int) (pid int, comm string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "Name":
			comm = strings.TrimSpace(v)
		case "Tgid":
			pid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return pid, comm
}
