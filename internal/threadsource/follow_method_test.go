// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zapcore"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// The default thread_sampler (auto) says by which method it follows the
// profiler's program: fentry where the kernel allows BPF trampolines (test/vm's
// Linux 6.1 guests, where it must be fentry), else the hrtimer, with the
// refusal as fentry_refused.
func TestThreadSamplerAutoSaysMethod(t *testing.T) {
	samplertest.Require(t)
	autoSaysMethod(t)
}

// unitCapsChild marks the process TestFollowWithUnitCapabilities starts.
const unitCapsChild = "OTELCTX_TEST_UNIT_CAPS_CHILD"

// TestFollowWithUnitCapabilities: as TestThreadSamplerAutoSaysMethod, in a
// process of uid 65534 with only the systemd unit's capabilities (ambient,
// as the unit grants them): the unit's set follows the profiler by the
// method the kernel allows, fentry in test/vm's guests and hrtimer where
// the kernel refuses trampolines (CAP_SYSLOG for /proc/kallsyms).
func TestFollowWithUnitCapabilities(t *testing.T) {
	if os.Getenv(unitCapsChild) != "" {
		autoSaysMethod(t)
		return
	}
	samplertest.Require(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary, where uid 65534 may run it.
	dir, err := os.MkdirTemp("", "otelctx-unit-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "threadsource.test")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var caps []uintptr
	for _, c := range samplertest.UnitCapabilities {
		caps = append(caps, c)
	}
	cmd := exec.Command(bin, "-test.run=^TestFollowWithUnitCapabilities$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), unitCapsChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: caps,
		Pdeathsig:   syscall.SIGKILL,
	}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 65534 with the unit's capabilities:\n%s", out)
	if err != nil {
		t.Fatalf("the follow test with the unit's capabilities: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Fatal("the child skipped")
	}
}

func autoSaysMethod(t *testing.T) {
	const name = "otelctx_auto_m" // the kernel keeps 15 bytes
	prof, err := fakeprof.Start(97, name)
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close()
	cfg := fastConfig(1 << 22)
	cfg.ThreadSampler = SamplerAuto
	cfg.ThreadContext.FollowPrograms = []string{name}
	w, logs, err := startObserved(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	var line string
	var fields map[string]any
	eventually(t, "a line saying the program is followed", func() bool {
		all := logs.FilterMessageSnippet("thread contexts: eBPF at the samples of " + name + " (BPF program ").All()
		if len(all) > 0 {
			line, fields = all[0].Message, all[0].ContextMap()
		}
		return len(all) > 0
	})
	t.Logf("%s %v", line, fields)
	_, refused := fields["fentry_refused"]
	switch {
	case strings.Contains(line, ", fentry"):
		if refused {
			t.Errorf("followed with fentry, and fentry_refused says %v", fields["fentry_refused"])
		}
	case os.Getenv("OTELCTX_VM_GUEST") != "":
		t.Errorf("the kernel allows fentry (test/vm guest), the line says otherwise: %s", line)
	case strings.Contains(line, ", hrtimer"):
		if !refused {
			t.Errorf("followed with the hrtimer without saying why not fentry (fentry_refused): %v", fields)
		}
	default:
		t.Errorf("no method in %q", line)
	}
	if e := logs.FilterMessageSnippet(line).All(); len(e) > 0 && e[0].Level != zapcore.InfoLevel {
		t.Errorf("logged at %v, want Info", e[0].Level)
	}
}

// A program followed with the hrtimer method although fentry works says why
// (its tail calls, on a kernel before 6.12) in the log line.
func TestDescribeFollowSaysWhyNotFentry(t *testing.T) {
	const why = "fentry skipped: the program tail-calls"
	st := sampler.FollowStatus{Method: sampler.MethodFentry, Programs: []sampler.FollowedProgram{
		{ID: 7, Name: "native_tracer_entry", Method: sampler.MethodHrtimer, NoFentry: why + " (...)", Sampled: true},
		{ID: 8, Name: "other", Method: sampler.MethodFentry, Sampled: true},
	}}
	got := describeFollow(st, fastConfig(1<<22).ThreadContext)
	want := "eBPF at the samples of native_tracer_entry (BPF program 7, hrtimer: " + why + " (...)), other (BPF program 8, fentry)"
	if got != want {
		t.Errorf("describeFollow = %q, want %q", got, want)
	}
}
