// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A read of another process's memory can fault in a page of a file whose
// server never answers, and such a wait ends for no signal, SIGKILL
// included: a process with one thread in it cannot exit. So no thread of
// this program makes the system call. Its workers hand each read to the
// reader helper, this program's own executable run again (helper_serve.go),
// each over a connection of its own; a hung read leaves a thread of the
// helper waiting, never one of this program, which a signal always ends.

// ErrHelper: the reader helper could not be started, or went away during
// the read.
var ErrHelper = errors.New("memory reader helper unavailable")

const (
	// helperEnv, set in the helper's environment, makes the executable
	// serve reads instead of starting (helper_serve.go).
	helperEnv   = "OTELCTX_MEMORY_READER"
	helperValue = "1"
	// helperFD is the helper's end of the control socket, on which it
	// receives its connections.
	helperFD = 3
	// helperIdle: the helper ends after this long without a connection
	// (workers end when idle); the next read starts another.
	helperIdle = time.Minute
	// helperRestartBackoff: after a failed start, reads fail at once
	// (ErrHelper) for this long before the next try.
	helperRestartBackoff = time.Second
	// maxRequestBytes bounds one read's total size (a context is at most
	// 128 KiB; the DD ring's slots less).
	maxRequestBytes = 64 << 20
	// maxRequestRanges bounds one read's ranges.
	maxRequestRanges = 1 << 16
)

// The wire format, native byte order (both ends are the same binary):
// request:  size u32 | id u32 | pid u32 | each u32 | n u32 | n x (addr u64, len u64)
// reply:    size u32 | id u32 | kind u32 | errno u32 | index u32 | calls u32 | got u64 | n x ok u8 | bytes
// size counts what follows it. kind: replyOK, replyErrno (errno at range
// index), replyShort (got bytes of a ReadAt).
const (
	requestHeader = 20
	rangeSize     = 16
	replyHeader   = 32
	replyOK       = 0
	replyErrno    = 1
	replyShort    = 2
)

// helper is this program's side: one helper process at a time, started at
// the first read. Each worker has a connection of its own to it (conn), so
// that a reply goes straight to the worker that waits for it.
type helper struct {
	mu       sync.Mutex
	ctl      int // the control socket (-1 while no helper runs): it carries connections' descriptors
	gen      uint64
	pid      int
	conns    int       // connections open to the running helper
	lastUse  time.Time // when the last connection closed
	failedAt time.Time // the last start that failed
	starts   uint64
	idle     *time.Timer // stopIfIdle's
}

var theHelper = &helper{ctl: -1}

// HelperStats is what the reader helper has done so far.
type HelperStats struct {
	Starts uint64 // helper processes started
	PID    int    // the running helper's process, 0 if none runs
}

// Helper returns the reader helper's stats.
func Helper() HelperStats {
	h := theHelper
	h.mu.Lock()
	defer h.mu.Unlock()
	st := HelperStats{Starts: h.starts}
	if h.ctl >= 0 {
		st.PID = h.pid
	}
	return st
}

// conn is a worker's connection to the helper: a blocking socket, so that
// the worker's thread sleeps in read(2) until the reply (interruptibly) and
// wakes with it, without a hop through Go's poller.
type conn struct {
	fd  int
	gen uint64 // the helper's it belongs to
	req []byte
	buf []byte // the reply's bytes
}

// read sends c to the helper on w's connection and waits for the reply.
// It returns once the helper has answered, or has gone: never on a
// deadline, which is the caller's (deadline.go) to keep.
func (h *helper) read(w *worker) {
	c := &w.c
	total := 0
	for _, b := range c.bufs {
		total += len(b)
	}
	if total > maxRequestBytes || len(c.bufs) > maxRequestRanges {
		c.err = fmt.Errorf("pid %d: a read of %d bytes in %d ranges: %w", c.pid, total, len(c.bufs), ErrShortRead)
		return
	}
	if w.conn != nil && !h.current(w.conn) {
		h.closeConn(w)
	}
	if w.conn == nil {
		cn, err := h.connect()
		if err != nil {
			c.err = err
			return
		}
		w.conn = cn
	}
	cn := w.conn
	cn.req = encodeRequest(cn.req[:0], c)
	if err := writeAll(cn.fd, cn.req); err != nil {
		h.closeConn(w)
		c.err = fmt.Errorf("pid %d: send to the reader helper: %v: %w", c.pid, err, ErrHelper)
		return
	}
	c.entered.Enter()
	if err := cn.readReply(c); err != nil {
		h.closeConn(w)
		c.err = fmt.Errorf("pid %d: the reader helper's reply: %v: %w", c.pid, err, ErrHelper)
	}
}

// current reports whether cn belongs to the running helper.
func (h *helper) current(cn *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ctl >= 0 && cn.gen == h.gen
}

// connect opens a connection to the helper, starting one if none runs: a
// socket pair whose other end goes to the helper over the control socket.
func (h *helper) connect() (*conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctl < 0 {
		if err := h.start(); err != nil {
			return nil, err
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %v: %w", err, ErrHelper)
	}
	defer unix.Close(fds[1])
	if err := unix.Sendmsg(h.ctl, []byte{0}, unix.UnixRights(fds[1]), nil, 0); err != nil {
		unix.Close(fds[0])
		h.stopLocked()
		return nil, fmt.Errorf("connect to the reader helper: %v: %w", err, ErrHelper)
	}
	h.conns++
	return &conn{fd: fds[0], gen: h.gen}, nil
}

// closeConn closes w's connection (the helper's goroutine for it ends).
func (h *helper) closeConn(w *worker) {
	if w.conn == nil {
		return
	}
	unix.Close(w.conn.fd)
	h.mu.Lock()
	if w.conn.gen == h.gen {
		h.conns--
		if h.conns == 0 {
			h.lastUse = time.Now()
		}
	}
	h.mu.Unlock()
	w.conn = nil
}

// start runs a new helper (under h.mu).
func (h *helper) start() error {
	if !h.failedAt.IsZero() && time.Since(h.failedAt) < helperRestartBackoff {
		return fmt.Errorf("the last start failed less than %v ago: %w", helperRestartBackoff, ErrHelper)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		h.failedAt = time.Now()
		return fmt.Errorf("socketpair: %v: %w", err, ErrHelper)
	}
	theirs := os.NewFile(uintptr(fds[1]), "memory reader control")
	defer theirs.Close()
	cmd := exec.Command(executable())
	cmd.Args = []string{"otelctx-memory-reader"}
	cmd.Env = []string{helperEnv + "=" + helperValue}
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		h.failedAt = time.Now()
		return fmt.Errorf("start %s: %v: %w", cmd.Path, err, ErrHelper)
	}
	h.failedAt = time.Time{}
	h.ctl = fds[0]
	h.gen++
	h.conns = 0
	h.starts++
	h.pid = cmd.Process.Pid
	h.lastUse = time.Now()
	gen := h.gen
	h.idle = time.AfterFunc(helperIdle, func() { h.stopIfIdle(gen) })
	go h.run(gen, cmd)
	return nil
}

// executable is the path this program was started from, or /proc/self/exe
// when the file was replaced (an upgrade in place) or cannot be told.
func executable() string {
	p, err := os.Executable()
	if err != nil || strings.HasSuffix(p, " (deleted)") {
		return "/proc/self/exe"
	}
	return p
}

// run waits for the helper of generation gen to exit. A helper thread may
// wait on a page for as long as the page's file system likes: this
// goroutine waits with it, never a read.
func (h *helper) run(gen uint64, cmd *exec.Cmd) {
	_ = cmd.Wait()
	h.mu.Lock()
	if h.gen == gen {
		h.stopLocked()
	}
	h.mu.Unlock()
}

// stopIfIdle ends the helper of generation gen once it has had no
// connection for helperIdle, else checks again later.
func (h *helper) stopIfIdle(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen || h.ctl < 0 {
		return
	}
	if h.conns == 0 && time.Since(h.lastUse) >= helperIdle {
		h.stopLocked() // the helper sees its control socket end, and exits
		return
	}
	h.idle.Reset(helperIdle / 4)
}

// stopLocked closes the control socket: the helper exits once it sees its
// end, and the connections of its generation fail at their next use (under
// h.mu).
func (h *helper) stopLocked() {
	if h.ctl >= 0 {
		unix.Close(h.ctl)
		h.ctl = -1
		h.conns = 0
		h.idle.Stop()
	}
}

// writeAll writes b to fd.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readReply reads one reply into c's buffers.
func (cn *conn) readReply(c *call) error {
	want := replyHeader + len(c.bufs)
	for _, b := range c.bufs {
		want += len(b)
	}
	if cap(cn.buf) < want {
		cn.buf = make([]byte, max(want, 4096))
	}
	buf := cn.buf[:want]
	for got := 0; got < want; {
		n, err := unix.Read(cn.fd, buf[got:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		got += n
		if got >= 4 && int(binary.NativeEndian.Uint32(buf))+4 != want {
			return fmt.Errorf("reply of %d bytes, want %d", binary.NativeEndian.Uint32(buf)+4, want)
		}
	}
	flags := buf[replyHeader : replyHeader+len(c.bufs)]
	for i := range c.bufs {
		if i < len(c.ok) {
			c.ok[i] = flags[i] == 1
		}
	}
	data := buf[replyHeader+len(c.bufs):]
	for _, b := range c.bufs {
		data = data[copy(b, data):]
	}
	c.calls = int(binary.NativeEndian.Uint32(buf[20:]))
	c.err = replyError(c, buf[:replyHeader])
	if cap(cn.buf) > maxScratchKeep {
		cn.buf = nil
	}
	return nil
}

// replyError is the error the reply reports, as the system call's would
// have been.
func replyError(c *call, hdr []byte) error {
	switch binary.NativeEndian.Uint32(hdr[8:]) {
	case replyOK:
		return nil
	case replyErrno:
		errno := unix.Errno(binary.NativeEndian.Uint32(hdr[12:]))
		i := int(binary.NativeEndian.Uint32(hdr[16:]))
		if i >= len(c.bufs) {
			i = 0
		}
		return classify(errno, c.pid, c.addrs[i], len(c.bufs[i]))
	default:
		got := binary.NativeEndian.Uint64(hdr[24:])
		return fmt.Errorf("pid %d: read %d of %d bytes at %#x: %w", c.pid, got, len(c.bufs[0]), c.addrs[0], ErrShortRead)
	}
}

// encodeRequest appends c's request.
func encodeRequest(b []byte, c *call) []byte {
	n := len(c.bufs)
	size := requestHeader - 4 + n*rangeSize
	b = binary.NativeEndian.AppendUint32(b, uint32(size))
	b = binary.NativeEndian.AppendUint32(b, 0) // id: one request at a time per connection
	b = binary.NativeEndian.AppendUint32(b, uint32(c.pid))
	each := uint32(0)
	if c.each {
		each = 1
	}
	b = binary.NativeEndian.AppendUint32(b, each)
	b = binary.NativeEndian.AppendUint32(b, uint32(n))
	for i, buf := range c.bufs {
		b = binary.NativeEndian.AppendUint64(b, c.addrs[i])
		b = binary.NativeEndian.AppendUint64(b, uint64(len(buf)))
	}
	return b
}
