package remote

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxIovecs is the iovecs one process_vm_readv call takes (IOV_MAX on
// Linux). ReadEach splits longer lists.
const MaxIovecs = 1024

// ReadEach fills bufs[i] from addrs[i] for every i with as few
// process_vm_readv calls as possible (one per MaxIovecs ranges when all are
// readable), and sets ok[i] when bufs[i] was read whole. The kernel stops a
// call at the first range it cannot read; ReadEach marks that range failed
// and goes on with the next one, so one unmapped range costs one more call,
// not the rest of the list. It returns the calls made; the error is only set
// when the process is gone or may not be read (nothing more can be read).
//
// The ranges are read in order: a range listed twice is read twice, the
// second time after the first (a double read for torn-write checks).
func (m Memory) ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error) {
	if len(addrs) != len(bufs) || len(ok) != len(bufs) {
		return 0, fmt.Errorf("remote: ReadEach: %d buffers, %d addresses, %d flags", len(bufs), len(addrs), len(ok))
	}
	var local [MaxIovecs]unix.Iovec
	var rem [MaxIovecs]unix.RemoteIovec
	for i := range ok {
		ok[i] = false
	}
	for i := 0; i < len(bufs); {
		// Empty buffers are trivially read and cannot be passed as an
		// iovec base.
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
		got, _, errno := unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(m.PID),
			uintptr(unsafe.Pointer(&local[0])), uintptr(n),
			uintptr(unsafe.Pointer(&rem[0])), uintptr(n), 0)
		calls++
		if errno != 0 && errno != unix.EFAULT {
			return calls, classify(errno, m.PID, addrs[i], len(bufs[i]))
		}
		if errno == unix.EFAULT {
			got = 0 // nothing read: the first range is the bad one
		}
		// Whole ranges read, in order; the range the count stops in (or
		// at) is the one the kernel could not read.
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
	return calls, nil
}
