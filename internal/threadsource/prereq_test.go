// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// fakeHost writes the files prereqs reads under a temporary root.
func fakeHost(t *testing.T, capEff string, btf bool, lockdown string) prereqs {
	t.Helper()
	dir := t.TempDir()
	p := prereqs{procRoot: filepath.Join(dir, "proc"), sysRoot: filepath.Join(dir, "sys")}
	write := func(path, content string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(p.procRoot+"/self/status", "Name:\ttest\nCapEff:\t"+capEff+"\n")
	if btf {
		write(p.sysRoot+"/kernel/btf/vmlinux", "")
	}
	if lockdown != "" {
		write(p.sysRoot+"/kernel/security/lockdown", lockdown)
	}
	return p
}

// Each missing prerequisite is named with its fix; a host that has them
// all has nothing to say (the kernel's error then speaks).
func TestPrereqProblems(t *testing.T) {
	const all = "000001ffffffffff"
	for _, tc := range []struct {
		name, caps   string
		btf          bool
		lockdown     string
		ebpf, ptrace string // substrings; "" = no problem
	}{
		{"everything", all, true, "none [integrity] confidentiality", "", ""},
		{"no capabilities", "0000000000000000", true, "", "lacks CAP_BPF and CAP_PERFMON", "lacks CAP_SYS_PTRACE"},
		{"perfmon only", "0000004000080000", true, "", "lacks CAP_BPF: grant", ""},
		{"sys_admin covers bpf", "0000000000280000", true, "", "", ""},
		{"no BTF", all, false, "", "no BTF", ""},
		{"lockdown", all, true, "none integrity [confidentiality]", "lockdown=confidentiality", ""},
	} {
		p := fakeHost(t, tc.caps, tc.btf, tc.lockdown)
		for _, c := range []struct{ got, want, what string }{{p.ebpfProblem(), tc.ebpf, "ebpf"}, {p.ptraceProblem(), tc.ptrace, "ptrace"}} {
			if (c.want == "") != (c.got == "") || !strings.Contains(c.got, c.want) {
				t.Errorf("%s: %s problem %q, want %q", tc.name, c.what, c.got, c.want)
			}
		}
	}
	for rel, want := range map[string][2]int{"6.18.44-fc-v782": {6, 18}, "5.4.0-150-generic": {5, 4}, "4.19": {4, 19}} {
		if maj, min, ok := sampler.ParseKernelRelease(rel); !ok || maj != want[0] || min != want[1] {
			t.Errorf("ParseKernelRelease(%q) = %d.%d %v", rel, maj, min, ok)
		}
	}
}

// auto names the missing capability rather than the kernel's EPERM.
func TestThreadSamplerFallbackNamesCause(t *testing.T) {
	injectSamplerFailure(t)
	prev := hostPrereqs
	hostPrereqs = fakeHost(t, "0000000000080000", true, "")
	t.Cleanup(func() { hostPrereqs = prev })
	cfg := fastConfig(1 << 22)
	cfg.ThreadSampler = SamplerAuto
	logs, err := startLogged(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := threadLines(logs); len(got) != 1 || !strings.Contains(got[0], "the kernel refused the eBPF sampler: the collector lacks CAP_BPF and CAP_PERFMON: grant them") {
		t.Errorf("log lines %q", got)
	}
}
