// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// memlockProblem explains a failed load when the memlock limit could not be
// raised (removeErr is rlimit.RemoveMemlock's: it raises the limit only on
// kernels that charge BPF maps to RLIMIT_MEMLOCK, before 5.11, and EPERM
// there means no CAP_SYS_RESOURCE); "" when that is not the cause.
func memlockProblem(removeErr error) string {
	if !errors.Is(removeErr, unix.EPERM) {
		return ""
	}
	limit := "unknown"
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		limit = "unlimited"
		if lim.Cur != unix.RLIM_INFINITY {
			limit = fmt.Sprintf("%d KiB", lim.Cur/1024)
		}
	}
	return fmt.Sprintf("this kernel (before 5.11) charges BPF maps to RLIMIT_MEMLOCK, which is %s and cannot be raised without CAP_SYS_RESOURCE: "+
		"add CAP_SYS_RESOURCE, or raise the limit (systemd LimitMEMLOCK=infinity, podman/docker --ulimit memlock=-1; docs/requirements.md)", limit)
}
