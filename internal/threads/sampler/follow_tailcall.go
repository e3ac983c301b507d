// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// errTailCallLoop: a trampoline on a program that tail-calls breaks the
// JIT's tail-call counter on kernels before 6.12 ("bpf, x64: Fix tailcall
// infinite loop", 6.7; "bpf, x64: Fix tailcall hierarchy", 6.12): a chain
// of tail calls can then loop in the sampling interrupt and wedge the CPU.
var errTailCallLoop = errors.New("fentry skipped: the program tail-calls and this kernel's trampolines can loop tail calls (fixed in Linux 6.12)")

// fentryLoopsTailCalls: a release that does not parse counts as affected.
func fentryLoopsTailCalls(release string, tailCalls bool) bool {
	if !tailCalls {
		return false
	}
	major, minor, ok := ParseKernelRelease(release)
	return !ok || major < 6 || major == 6 && minor < 12
}

// ParseKernelRelease reads a uname release ("6.1.0-47-cloud-amd64") as 6, 1;
// the watcher's prerequisites use it too.
func ParseKernelRelease(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimSpace(release), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	digits := func(s string) string {
		if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			return s[:i]
		}
		return s
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(digits(parts[1]))
	return major, minor, err1 == nil && err2 == nil && major >= 0 && minor >= 0
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// usesProgArray: a program whose maps cannot all be listed or opened counts
// as one that tail-calls.
func usesProgArray(info *ebpf.ProgramInfo) bool {
	ids, ok := info.MapIDs()
	if !ok {
		return true
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return true
		}
		typ := m.Type()
		_ = m.Close()
		if typ == ebpf.ProgramArray {
			return true
		}
	}
	return false
}
