// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exitWatcher learns which watched processes have exited with one
// epoll_wait per scan, whatever the number of processes.
//
// A pidfd refers to one process, never to a later process that reuses its
// PID. Reading memory by PID and then finding the pidfd still alive proves
// the read came from the process the pidfd was opened for: a PID can only be
// reused after its process has exited.
type exitWatcher struct {
	epfd   int
	events []unix.EpollEvent
}

func newExitWatcher() (*exitWatcher, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &exitWatcher{epfd: fd, events: make([]unix.EpollEvent, 64)}, nil
}

// openPidfd returns a pidfd for pid, or -1 (with the error) when pidfds
// are unavailable. ESRCH means pid is gone.
func openPidfd(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// watch registers the pidfd of process pid for exit notification; the
// event carries both back (epoll_data: Fd and Pad), so no index maps a
// pidfd to its PID. Only tracked publishers are watched: their number is
// bounded (Options.MaxProcesses), the host's processes are not.
func (w *exitWatcher) watch(fd, pid int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd), Pad: int32(pid)}
	return unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
}

// closePidfd closes a pidfd (closing removes it from epoll).
func closePidfd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// exited calls fn with the pidfd and PID of every watched process that has
// exited. A pidfd stays readable once its process exits, so a caller that
// does not close the fd will see it again.
func (w *exitWatcher) exited(fn func(fd, pid int)) error {
	for {
		n, err := unix.EpollWait(w.epfd, w.events, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range w.events[:n] {
			fn(int(ev.Fd), int(ev.Pad))
		}
		if n < len(w.events) {
			return nil
		}
	}
}

// alive reports whether the process behind fd has not exited.
func alive(fd int) bool {
	if fd < 0 {
		return true // no pidfd: Scanner.same falls back to the start time
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

// shutdown closes the epoll fd once: a second close could hit an fd number
// that another part of the process has since been given.
func (w *exitWatcher) shutdown() error {
	if w.epfd < 0 {
		return nil
	}
	fd := w.epfd
	w.epfd = -1
	return unix.Close(fd)
}
