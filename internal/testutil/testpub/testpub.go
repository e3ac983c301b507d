// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package testpub compiles and drives the C test publisher in
// testdata/otel_ctx_publisher.c: real processes publishing a real process context.
package testpub

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

type Libc string

const (
	Glibc Libc = "gcc"      // the system compiler, glibc
	Musl  Libc = "musl-gcc" // musl-tools' wrapper
)

var Libcs = []Libc{Glibc, Musl}

// Name is the C library's name: "glibc" or "musl".
func (l Libc) Name() string {
	if l == Musl {
		return "musl"
	}
	return "glibc"
}

// ForEachLibc runs fn as a subtest (named by Libc.Name) once per C library
// the publisher is built with.
func ForEachLibc(t *testing.T, fn func(t *testing.T, libc Libc)) {
	t.Helper()
	for _, libc := range Libcs {
		t.Run(libc.Name(), func(t *testing.T) { fn(t, libc) })
	}
}

func Source() string { return testenv.Testdata("publishers", "otel_ctx_publisher.c") }

var builds Builds

// Build: a missing compiler skips (fails under CI=true).
func Build(tb testing.TB, libc Libc) string {
	tb.Helper()
	return builds.Get(tb, libc, func(cc string) string {
		return CompileC(tb, cc, PublisherName(libc), Source(), PublisherFlags...)
	})
}

// PublisherFlags and PublisherName: how Build compiles the publisher.
var PublisherFlags = []string{"-O2", "-Wall", "-pthread"}

func PublisherName(libc Libc) string { return "otel_ctx_publisher-" + string(libc) }

// CompileC caches by content (compiler, flags, source) in the temp directory,
// so nothing accumulates per run; the rename into place means parallel test
// binaries never see a partial executable.
func CompileC(tb testing.TB, cc, name, src string, flags ...string) string {
	tb.Helper()
	if d := PrebuiltDir(); d != "" {
		return Prebuilt(tb, filepath.Join(d, "testbin", name))
	}
	source, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", cc, strings.Join(flags, "\x00"))
	if fi, err := os.Stat(cc); err == nil { // a compiler upgrade changes the build
		fmt.Fprintf(h, "%d\x00%d\x00", fi.Size(), fi.ModTime().UnixNano())
	}
	h.Write(source)
	dir := filepath.Join(os.TempDir(), "otelctx-testbin", hex.EncodeToString(h.Sum(nil))[:16])
	out := filepath.Join(dir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp, err := os.CreateTemp(dir, name+".tmp-")
	if err != nil {
		tb.Fatal(err)
	}
	tmp.Close()
	if !compile(tb, cc, tmp.Name(), src, flags) {
		os.Remove(tmp.Name())
		tb.FailNow()
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		tb.Fatal(err)
	}
	return out
}

func compile(tb testing.TB, cc, out, src string, flags []string) bool {
	tb.Helper()
	args := append(append([]string{}, flags...), "-o", out, src)
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		tb.Errorf("%s %v: %v\n%s", cc, args, err, msg)
		return false
	}
	return true
}

type Publisher struct {
	tb   testing.TB
	proc *Proc
	PID  int
}

var ReplyTimeout = 10 * time.Second

func Start(tb testing.TB, libc Libc) *Publisher {
	tb.Helper()
	return StartBinary(tb, Build(tb, libc))
}

func StartBinary(tb testing.TB, path string, args ...string) *Publisher {
	tb.Helper()
	return StartBinaryTimeout(tb, ReplyTimeout, path, args...)
}

// StartAs runs the publisher as another user (real and effective UID and
// GID of cred), e.g. nobody beside the test's root.
func StartAs(tb testing.TB, libc Libc, cred *syscall.Credential) *Publisher {
	tb.Helper()
	return StartWith(tb, libc, &syscall.SysProcAttr{Credential: cred})
}

// StartWith runs the publisher with attr (credentials, namespaces).
func StartWith(tb testing.TB, libc Libc, attr *syscall.SysProcAttr) *Publisher {
	tb.Helper()
	proc := RunProcAttr(tb, "publisher", ReplyTimeout, nil, attr, Build(tb, libc))
	p := &Publisher{tb: tb, proc: proc, PID: proc.PID}
	if l := proc.ReadLine(); l != "ready "+strconv.Itoa(p.PID) {
		tb.Fatalf("publisher: unexpected greeting %q", l)
	}
	return p
}

// StartBinaryTimeout runs any program speaking the line protocol ("ready PID",
// then "ok …" or "err …" per command).
func StartBinaryTimeout(tb testing.TB, timeout time.Duration, path string, args ...string) *Publisher {
	tb.Helper()
	proc := RunProc(tb, "publisher", timeout, nil, path, args...)
	p := &Publisher{tb: tb, proc: proc, PID: proc.PID}
	if l := proc.ReadLine(); l != "ready "+strconv.Itoa(p.PID) {
		tb.Fatalf("publisher: unexpected greeting %q", l)
	}
	return p
}

// Do sends one command and returns the fields after "ok"; "err" fails the test.
func (p *Publisher) Do(format string, args ...any) []string {
	p.tb.Helper()
	cmd, l := p.proc.Ask(format, args...)
	return p.fields(cmd, l)
}

// DoCPU is Do for a command whose reply comes after CPU work: its wait is
// stretched while the publisher runs (Proc.ReadLineWhile), so a busy host
// makes it slow, not failed.
func (p *Publisher) DoCPU(format string, args ...any) []string {
	p.tb.Helper()
	cmd, l := p.proc.AskWhile(p.proc.Running(), format, args...)
	return p.fields(cmd, l)
}

func (p *Publisher) fields(cmd, l string) []string {
	p.tb.Helper()
	f := strings.Fields(l)
	if len(f) == 0 || f[0] != "ok" {
		p.tb.Fatalf("publisher %d: %s: %s", p.PID, cmd, l)
	}
	return f[1:]
}

func (p *Publisher) Publish() (addr, stamp uint64) {
	p.tb.Helper()
	f := p.Do("publish")
	addr, _ = strconv.ParseUint(f[0], 0, 64)
	stamp, _ = strconv.ParseUint(f[1], 10, 64)
	return addr, stamp
}

func (p *Publisher) Set(kv ...string) {
	p.tb.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		p.Do("set %s %s", kv[i], kv[i+1])
	}
}

func (p *Publisher) Exit() {
	p.tb.Helper()
	p.proc.Stop("exit", ReplyTimeout)
}

func (p *Publisher) Wait() {
	p.tb.Helper()
	p.proc.Wait(ReplyTimeout)
}

// Kill also kills forked children, through PDEATHSIG.
func (p *Publisher) Kill() { p.proc.Kill() }
