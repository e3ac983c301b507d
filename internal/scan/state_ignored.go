// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

// An ignored PID is a process not looked at again while it lives: a kernel
// thread, one the filter excludes, or one whose memory may not be read
// (denied now is denied for the process's life: the same credentials, the
// same policy). Its state is its identity (pidState.start, ino) alone.

// ignore makes ps an ignored process's, started at start (ino: its /proc
// directory's inode, 0 when not listed).
func (ps *pidState) ignore(start, ino uint64) {
	*ps = pidState{kind: stateIgnored, rescan: ps.rescan, start: start, ino: ino}
}

// lookAtIgnored looks at an ignored PID only if its process may be
// another: listed with another inode, or looked up by PID alone (Rescan,
// PollPIDs); a new process behind the PID is looked at as new.
func (s *Scanner) lookAtIgnored(r *round, e procEntry, ps *pidState) {
	if e.ino != 0 && e.ino == ps.ino {
		return // listed with the same inode: the same process
	}
	if s.stat.start(e.pid) == ps.start {
		if e.ino != 0 {
			ps.ino = e.ino // the same process, a new dentry
		}
		return
	}
	s.forget(e.pid)
	s.probe(r, e, nil) // a new process behind the PID
}
