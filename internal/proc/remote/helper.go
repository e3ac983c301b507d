// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
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

var (
	// ErrHelper: the reader helper could not be started, or went away
	// during the read.
	ErrHelper = errors.New("memory reader helper unavailable")
	// ErrTooLarge: one read asked for more than maxRequestBytes or
	// maxRequestRanges.
	ErrTooLarge = errors.New("read too large")
)

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
	// helperCheck: how often checkHelper looks at the running helper.
	helperCheck = time.Second
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
	started  time.Time
	open     map[int]bool // our ends of the running helper's connections
	lastUse  time.Time    // when the last connection closed
	failedAt time.Time    // the last start that failed
	starts   uint64
	check    *time.Timer // checkHelper's
}

var theHelper = &helper{ctl: -1, open: map[int]bool{}}

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
	fd        int
	gen       uint64 // the helper's it belongs to
	pid, tid  int    // the helper, and its thread that serves this connection
	req       []byte
	buf       []byte // the reply's bytes
	helloRead bool
}

// read sends c to the helper on w's connection and waits for the reply.
// It returns once the helper has answered, or has gone: never on a
// deadline, which is the caller's (deadline.go) to keep.
func (h *helper) read(w *worker) {
	c := &w.c
	clear(c.ok)
	total := 0
	for _, b := range c.bufs {
		total += len(b)
	}
	if total > maxRequestBytes || len(c.bufs) > maxRequestRanges {
		c.err = fmt.Errorf("pid %d: a read of %d bytes in %d ranges: %w", c.pid, total, len(c.bufs), ErrTooLarge)
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
	if !cn.helloRead {
		// The helper's first word: the thread that serves the connection.
		var hello [4]byte
		if err := readFull(cn.fd, hello[:]); err != nil {
			h.closeConn(w)
			c.err = fmt.Errorf("pid %d: the reader helper's hello: %v: %w", c.pid, err, ErrHelper)
			return
		}
		cn.tid, cn.helloRead = int(binary.NativeEndian.Uint32(hello[:])), true
	}
	c.helperPID, c.helperTID = cn.pid, cn.tid
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
	// Never waits under h.mu: a helper that does not take its connections
	// is a helper gone.
	if err := unix.Sendmsg(h.ctl, []byte{0}, unix.UnixRights(fds[1]), nil, unix.MSG_DONTWAIT); err != nil {
		unix.Close(fds[0])
		h.stopLocked()
		return nil, fmt.Errorf("connect to the reader helper: %v: %w", err, ErrHelper)
	}
	h.open[fds[0]] = true
	return &conn{fd: fds[0], gen: h.gen, pid: h.pid}, nil
}

// closeConn closes w's connection (the helper's goroutine for it ends).
func (h *helper) closeConn(w *worker) {
	if w.conn == nil {
		return
	}
	// Out of h.open before the close: stopLocked never shuts down a
	// number the kernel may have given to another file.
	h.mu.Lock()
	if w.conn.gen == h.gen && h.open[w.conn.fd] {
		delete(h.open, w.conn.fd)
		if len(h.open) == 0 {
			h.lastUse = time.Now()
		}
	}
	h.mu.Unlock()
	unix.Close(w.conn.fd)
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
	// This very executable, even where its file was replaced (an upgrade)
	// or removed: both ends speak the same protocol.
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"otelctx-memory-reader"}
	cmd.Env = []string{helperEnv + "=" + helperValue}
	cmd.ExtraFiles = []*os.File{theirs}
	// No stdout or stderr: a helper left waiting on a page after this
	// program exited must not hold its output pipes open.
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		h.failedAt = time.Now()
		return fmt.Errorf("start %s: %v: %w", cmd.Path, err, ErrHelper)
	}
	h.failedAt = time.Time{}
	h.ctl = fds[0]
	h.gen++
	h.starts++
	h.pid = cmd.Process.Pid
	h.started = time.Now()
	h.lastUse = h.started
	gen := h.gen
	h.check = time.AfterFunc(helperCheck, func() { h.checkHelper(gen) })
	go h.run(gen, cmd)
	return nil
}

// run waits for the helper of generation gen to exit. A helper thread may
// wait on a page for as long as the page's file system likes: this
// goroutine waits with it, never a read (checkHelper notices the helper
// gone before it is reaped).
func (h *helper) run(gen uint64, cmd *exec.Cmd) {
	_ = cmd.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == gen {
		if time.Since(h.started) < helperRestartBackoff {
			h.failedAt = time.Now() // it does not run here: no start per read
		}
		h.stopLocked()
	}
}

// checkHelper, every helperCheck while the helper of generation gen runs,
// ends it once it has had no connection for helperIdle, and notices it
// gone while a thread of it still waits on a page (its main thread exited:
// killed, or crashed), which the reap does not tell until that wait ends.
func (h *helper) checkHelper(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen || h.ctl < 0 {
		return
	}
	switch {
	case !processAlive(h.pid):
		h.stopLocked()
	case len(h.open) == 0 && time.Since(h.lastUse) >= helperIdle:
		h.stopLocked() // the helper sees its control socket end, and exits
	default:
		h.check.Reset(helperCheck)
	}
}

// processAlive reports whether pid's main thread has not exited (a zombie,
// or a process whose other threads still run, has).
func processAlive(pid int) bool {
	st, ok := threadState(pid, pid)
	return ok && st != 'Z' && st != 'X'
}

// threadState is the state letter of thread tid of process pid, from its
// stat file (which takes no lock of its address space).
func threadState(pid, tid int) (byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndex(b, []byte(") "))
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

// helperStarved reports whether the helper's thread tid is runnable or
// stopped rather than asleep in its system call: a read late for this
// host's reasons (no CPU for the helper, a throttled cgroup), not the
// target's.
func helperStarved(pid, tid int) bool {
	st, ok := threadState(pid, tid)
	return ok && (st == 'R' || st == 'T' || st == 't')
}

// stopLocked closes the control socket (the helper exits once it sees its
// end) and shuts the connections of its generation down: a worker waiting
// for a reply gets ErrHelper (under h.mu).
func (h *helper) stopLocked() {
	if h.ctl >= 0 {
		unix.Close(h.ctl)
		h.ctl = -1
		h.check.Stop()
		// Wake the workers that wait for a reply: it will not come.
		for fd := range h.open {
			_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		}
		clear(h.open)
	}
}

// readFull reads len(b) bytes from fd.
func readFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Read(fd, b)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return io.ErrUnexpectedEOF
		}
		b = b[n:]
	}
	return nil
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
	case replyErrno, replyShort:
		if len(c.bufs) == 0 {
			return fmt.Errorf("pid %d: an error reply to an empty read: %w", c.pid, ErrHelper)
		}
	}
	switch binary.NativeEndian.Uint32(hdr[8:]) {
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
