// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Capability bits of /proc/self/status's CapEff.
const (
	capSysPtrace = 19
	capSysAdmin  = 21
	capPerfmon   = 38
	capBPF       = 39
)

// prereqs are the host facts the thread samplers depend on, read once at
// Start so that a failure is explained by its cause and fix rather than by
// the kernel's last error (EPERM reads as "MEMLOCK may be too low").
type prereqs struct {
	procRoot, sysRoot string
}

var hostPrereqs = prereqs{procRoot: "/proc", sysRoot: "/sys"}

// effectiveCaps is the process's effective capability set; ok is false
// when it cannot be read.
func (p prereqs) effectiveCaps() (caps uint64, ok bool) {
	b, err := os.ReadFile(p.procRoot + "/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "CapEff:"); found {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// ebpfProblem names what keeps the eBPF sampler from loading and how to
// fix it, or "" when nothing known does (the kernel's error then speaks).
func (p prereqs) ebpfProblem() string {
	if caps, ok := p.effectiveCaps(); ok && caps&(1<<capSysAdmin) == 0 {
		var missing []string
		if caps&(1<<capBPF) == 0 {
			missing = append(missing, "CAP_BPF")
		}
		if caps&(1<<capPerfmon) == 0 {
			missing = append(missing, "CAP_PERFMON")
		}
		if len(missing) > 0 {
			return fmt.Sprintf("the collector lacks %s: grant them (systemd AmbientCapabilities, setcap on the binary, "+
				"or the container's capabilities; see docs/requirements.md)", strings.Join(missing, " and "))
		}
	}
	if _, err := os.Stat(p.sysRoot + "/kernel/btf/vmlinux"); err != nil {
		return "the kernel exposes no BTF (" + p.sysRoot + "/kernel/btf/vmlinux; CONFIG_DEBUG_INFO_BTF=y is needed), " +
			"or it is not mounted into the container: mount /sys/kernel/btf read-only"
	}
	if b, err := os.ReadFile(p.sysRoot + "/kernel/security/lockdown"); err == nil && strings.Contains(string(b), "[confidentiality]") {
		return "kernel lockdown=confidentiality forbids BPF programs to read process memory: boot with lockdown=integrity or none"
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		if major, minor, ok := sampler.ParseKernelRelease(unix.ByteSliceToString(u.Release[:])); ok && (major < 5 || major == 5 && minor < 8) {
			return fmt.Sprintf("kernel %d.%d is older than 5.8 (BPF ring buffers): upgrade the kernel", major, minor)
		}
	}
	return ""
}

// ptraceProblem says why ptrace snapshots cannot work here ("" if they
// can): no CAP_SYS_PTRACE in the effective set, or Yama forbids attaching.
func (p prereqs) ptraceProblem() string {
	if caps, ok := p.effectiveCaps(); ok && caps&(1<<capSysPtrace) == 0 {
		return "the collector lacks CAP_SYS_PTRACE: grant it (see docs/requirements.md)"
	}
	if b, err := os.ReadFile(p.procRoot + "/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		return "kernel.yama.ptrace_scope is 3 (no process may attach): set it to 2 or lower"
	}
	return ""
}

// HasPtraceCapability reports whether the collector holds CAP_SYS_PTRACE
// (the watcher's advice when processes cannot be read).
func HasPtraceCapability() bool { return hostPrereqs.hasPtrace() }

func (p prereqs) hasPtrace() bool {
	caps, ok := p.effectiveCaps()
	return ok && caps&(1<<capSysPtrace) != 0
}
