// SPDX-License-Identifier: Apache-2.0

//go:build linux

package procstat

import (
	"bytes"
	"os"
	"strconv"
)

// RealUID is the real UID on the "Uid:" line of /proc/PID/status (which
// the kernel writes; the process chooses only its Name line, escaped),
// -1 when it cannot be read. Unlike the owner of /proc/PID, it does not
// turn to root when the process makes itself non-dumpable.
func RealUID(procRoot string, pid int) int {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	b := make([]byte, 1024) // Uid is the ninth line, after a Name of at most 64 bytes
	n, _ := f.Read(b)
	return parseStatusUID(b[:n])
}

func parseStatusUID(b []byte) int {
	i := bytes.Index(b, []byte("\nUid:\t"))
	if i < 0 {
		return -1
	}
	b = b[i+len("\nUid:\t"):]
	if j := bytes.IndexAny(b, "\t\n"); j >= 0 {
		b = b[:j]
	} else {
		return -1 // cut off
	}
	uid, err := strconv.ParseUint(string(b), 10, 32)
	if err != nil {
		return -1
	}
	return int(uid)
}
