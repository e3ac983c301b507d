// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// ddEvent checks that ev is kind for w's process, with its buffer (or not)
// and its process context (or not).
func ddEvent(t *testing.T, ev *publisher.Event, w *ddwriter.Writer, withBuffer, withContext bool) {
	t.Helper()
	if ev == nil {
		t.Fatal("no event")
	}
	p := ev.Process
	if withBuffer != (p.Buffer != nil) || withContext != p.HasContext() {
		t.Fatalf("%v: buffer %+v, context %v; want buffer %v, context %v", ev.Kind, p.Buffer, p.HasContext(), withBuffer, withContext)
	}
	if withBuffer && (p.Buffer.Addr != w.Buf || p.Buffer.Capacity != w.Capacity) {
		t.Fatalf("%v: buffer %+v, writer's at %#x with %d slots", ev.Kind, p.Buffer, w.Buf, w.Capacity)
	}
	if p.CreationTime.IsZero() || p.ExecutableName == "" {
		t.Fatalf("%v: process metadata missing: %+v", ev.Kind, p)
	}
}

// TestDDOnly: a process with a DD_OTEL_CTX buffer and no process context
// is tracked for its buffer; a context published later joins it, a buffer
// that stops validating leaves it, and it is lost when it has neither.
func TestDDOnly(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc ddwriter.Libc) {
		f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}})
		w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: 16, Threads: 1})
		f.own(w.PID)
		evs, st := f.scan()
		ddEvent(t, findEvent(evs, publisher.Found, w.PID), w, true, false)
		if st.BuffersFound != 1 || st.BuffersTracked != 1 || st.ContextsTracked != 0 {
			t.Fatalf("stats %+v", st)
		}
		// Steady state: one header read, nothing new.
		evs, st = f.poll()
		if len(evs) != 0 || st.BufferSearches != 0 || st.Polled != 1 {
			t.Fatalf("poll: %s, %+v", describe(evs), st)
		}
		// The process publishes a context: a forced look (the prctl hook)
		// finds it, the buffer stays.
		w.Context("ddsvc")
		f.s.Rescan(w.PID)
		evs, _ = f.poll()
		ddEvent(t, findEvent(evs, publisher.Updated, w.PID), w, true, true)
		// A header that turns bad drops the buffer, not the process.
		w.Header(ddotel.Magic, 2, 16, 32)
		evs, st = f.poll()
		ddEvent(t, findEvent(evs, publisher.Updated, w.PID), w, false, true)
		if st.BuffersLost != 1 {
			t.Fatalf("stats %+v", st)
		}
		w.Header(ddotel.Magic, 1, 16, 32)
		f.s.Rescan(w.PID)
		evs, _ = f.poll()
		ddEvent(t, findEvent(evs, publisher.Updated, w.PID), w, true, true)
		w.Quit()
		f.waitEvent(publisher.Lost, w.PID)
	})
}

// TestDDLost: a process tracked for its buffer alone is lost when the
// buffer stops validating.
func TestDDLost(t *testing.T) {
	f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	f.own(w.PID)
	evs, _ := f.scan()
	ddEvent(t, findEvent(evs, publisher.Found, w.PID), w, true, false)
	w.Header(ddotel.Magic, 1, 0xffffffff, 32)
	evs, st := f.poll()
	if findEvent(evs, publisher.Lost, w.PID) == nil || st.BuffersLost != 1 || st.BuffersTracked != 0 {
		t.Fatalf("bad capacity: %s, %+v", describe(evs), st)
	}
	// Looked at again (forced here): refused, with the reason counted.
	f.s.Rescan(w.PID)
	evs, st = f.poll()
	if len(evs) != 0 || st.BufferSearches != 1 || st.BufferHeadersRefused != 1 {
		t.Fatalf("refused: %s, %+v", describe(evs), st)
	}
}

// TestDDJava: by default only JVM-looking processes are searched: an
// executable named java is, one that maps a libjvm.so is, another is not
// (SearchNone: none is).
func TestDDJava(t *testing.T) {
	exe := ddwriter.Build(t, ddwriter.Glibc)
	dir := t.TempDir()
	libjvm := filepath.Join(dir, "libjvm.so")
	src := filepath.Join(dir, "jvm.c")
	if err := os.WriteFile(src, []byte("int JNI_CreateJavaVM_stub(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testenv.RequireTool(t, "gcc"), "-shared", "-fPIC", "-o", libjvm, src).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	java := filepath.Join(dir, "java")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(java, b, 0o755); err != nil {
		t.Fatal(err)
	}
	preload := []string{"LD_PRELOAD=" + libjvm}
	for _, tc := range []struct {
		mode  ddscan.Mode
		path  string
		env   []string
		found bool
	}{
		{ddscan.SearchJava, java, nil, true},
		{ddscan.SearchJava, exe, preload, true},
		{ddscan.SearchJava, exe, nil, false},
		{ddscan.SearchNone, java, preload, false},
		{ddscan.SearchAll, exe, nil, true},
	} {
		f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(tc.mode)}})
		w := ddwriter.StartBinary(t, tc.path, ddwriter.Options{Capacity: 16, Threads: 1, Env: tc.env})
		f.own(w.PID)
		evs, st := f.scan()
		if got := findEvent(evs, publisher.Found, w.PID) != nil; got != tc.found {
			t.Errorf("mode %d, %s %v: found %v, want %v (%+v)", tc.mode, filepath.Base(tc.path), tc.env, got, tc.found, st)
		}
		w.Kill()
	}
}

// poll runs one Poll and returns the events of the test's PIDs.
func (f *fixture) poll() ([]publisher.Event, scan.Stats) {
	f.t.Helper()
	return f.mine("Poll", f.s.Poll)
}

// TestDDWithContext: a process that publishes a process context and has a
// buffer is found with both at once.
func TestDDWithContext(t *testing.T) {
	f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}})
	w := ddwriter.Start(t, ddwriter.Musl, ddwriter.Options{Capacity: 16, Threads: 1, Context: "dd-svc"})
	f.own(w.PID)
	evs, st := f.scan()
	ev := findEvent(evs, publisher.Found, w.PID)
	ddEvent(t, ev, w, true, true)
	if v := attr(ev.Process.Context.Resource.Attributes, "service.name"); v.Str != "dd-svc" || st.ContextsTracked != 1 || st.BuffersTracked != 1 {
		t.Fatalf("service.name %+v, stats %+v", v, st)
	}
}

// TestDDRefusedOnce: a refused header is counted once per process and
// header address, not at every recheck of the process.
func TestDDRefusedOnce(t *testing.T) {
	f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	w.Header(ddotel.Magic, 2, 16, 32)
	f.own(w.PID)
	evs, st := f.scan()
	if len(evs) != 0 || st.BufferSearches != 1 || st.BufferHeadersRefused != 1 {
		t.Fatalf("first look: %s, %+v; want one refusal", describe(evs), st)
	}
	for i := range 3 {
		// Looked at again (forced here, as a recheck would): the same
		// header, or another bad one at the same address, is not news.
		if i == 1 {
			w.Header(ddotel.Magic, 1, 16, 64)
		}
		f.s.Rescan(w.PID)
		evs, st = f.poll()
		if len(evs) != 0 || st.BufferSearches != 1 || st.BufferHeadersRefused != 0 {
			t.Fatalf("recheck %d: %s, %+v; want the refusal not counted again", i, describe(evs), st)
		}
	}
	// A good header is found.
	w.Header(ddotel.Magic, 1, 16, 32)
	f.s.Rescan(w.PID)
	evs, _ = f.poll()
	ddEvent(t, findEvent(evs, publisher.Found, w.PID), w, true, false)
}

// lowFDLimit makes the next file descriptor the process opens fail with
// EMFILE (RLIMIT_NOFILE at the lowest free descriptor) until restore.
func lowFDLimit(t *testing.T) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	low := old
	low.Cur = uint64(fd)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDDTransientRevalidateFailure: a header check that fails for a reason
// that says nothing about the buffer (here EMFILE opening pagemap, which a
// poll opens when the process's could not be held) counts a failure and
// keeps the process and its buffer; only a header that is gone or changed
// loses them.
func TestDDTransientRevalidateFailure(t *testing.T) {
	f := newFixture(t, scan.Options{Buffers: []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	f.own(w.PID)
	evs, _ := f.scan()
	ddEvent(t, findEvent(evs, publisher.Found, w.PID), w, true, false)

	f.s.DropPagemaps()
	restore := lowFDLimit(t)
	evs, st, err := f.s.Poll()
	restore()
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	for _, n := range st.Failures {
		failures += n
	}
	if len(evs) != 0 || st.BuffersLost != 0 || st.BuffersTracked != 1 || failures != 1 {
		t.Fatalf("EMFILE: %s, %+v; want the process kept with its buffer and one failure counted", describe(evs), st)
	}
	if p, ok := f.s.Lookup(w.PID); !ok || p.Buffer == nil {
		t.Fatalf("after EMFILE: tracked %v, %+v", ok, p)
	}
	evs, st = f.poll()
	if len(evs) != 0 || st.BuffersTracked != 1 {
		t.Fatalf("next poll: %s, %+v", describe(evs), st)
	}
	// A header really gone is lost, as before.
	w.Header(0, 0, 0, 0)
	evs, st = f.poll()
	if findEvent(evs, publisher.Lost, w.PID) == nil || st.BuffersLost != 1 {
		t.Fatalf("bad magic: %s, %+v", describe(evs), st)
	}
}
