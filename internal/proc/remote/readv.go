// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxIovecs is IOV_MAX; ReadEach splits longer lists.
const MaxIovecs = 1024

// ReadEach reads bufs[i] from addrs[i] in order (a range listed twice is
// read twice) and sets ok[i]. The kernel stops a call at the first bad
// range, so ReadEach skips it and goes on: one unmapped range costs one call.
// err is set only when nothing more can be read.
// The whole batch waits at most the read timeout, as ReadAt.
func (m Memory) ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error) {
	if len(addrs) != len(bufs) || len(ok) != len(bufs) {
		return 0, fmt.Errorf("remote: ReadEach: %d buffers, %d addresses, %d flags", len(bufs), len(addrs), len(ok))
	}
	return reader.readEach(m.PID, bufs, addrs, ok)
}

// rawReadEachErrno is the system calls, in the reader helper
// (helper_serve.go). A call that fails other than on a bad range ends the
// reads: its error number and the index of the range it began at.
func rawReadEachErrno(pid int, bufs [][]byte, addrs []uint64, ok []bool) (calls int, errno unix.Errno, index int) {
	var local [MaxIovecs]unix.Iovec
	var rem [MaxIovecs]unix.RemoteIovec
	for i := range ok {
		ok[i] = false
	}
	for i := 0; i < len(bufs); {
		// Empty buffers cannot be an iovec base.
		for i < len(bufs) && len(bufs[i]) == 0 {
			ok[i] = true
			i++
		}
		if i == len(bufs) {
			break
		}
		n := 0
		for j := i; j < len(bufs) && n < MaxIovecs && len(bufs[j]) > 0; j++ {
			local[n] = unix.Iovec{Base: &bufs[j][0], Len: uint64(len(bufs[j]))}
			rem[n] = unix.RemoteIovec{Base: uintptr(addrs[j]), Len: len(bufs[j])}
			n++
		}
		got, _, e := unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
			uintptr(unsafe.Pointer(&local[0])), uintptr(n),
			uintptr(unsafe.Pointer(&rem[0])), uintptr(n), 0)
		calls++
		if e != 0 && e != unix.EFAULT {
			return calls, e, i
		}
		if e == unix.EFAULT {
			got = 0 // nothing read: the first range is the bad one
		}
		// The range the count stops in is the one the kernel could not read.
		j := i
		for left := uint64(got); j < i+n && left >= uint64(len(bufs[j])); j++ {
			left -= uint64(len(bufs[j]))
			ok[j] = true
		}
		if j < i+n {
			j++ // skip the failed range
		}
		i = j
	}
	return calls, 0, 0
}
