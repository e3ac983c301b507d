package scan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/otelctx/otelctx/internal/ddwriter"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/testenv"
)

// ddEvent checks that ev is kind for w's process, with its buffer (or not)
// and its process context (or not).
func ddEvent(t *testing.T, ev *scan.Event, w *ddwriter.Writer, withBuffer, withContext bool) {
	t.Helper()
	if ev == nil {
		t.Fatal("no event")
	}
	p := ev.Process
	if withBuffer != (p.DDBuffer != nil) || withContext != p.HasContext() {
		t.Fatalf("%v: buffer %+v, context %v; want buffer %v, context %v", ev.Kind, p.DDBuffer, p.HasContext(), withBuffer, withContext)
	}
	if withBuffer && (p.DDBuffer.Addr != w.Buf || p.DDBuffer.Capacity != w.Capacity) {
		t.Fatalf("%v: buffer %+v, writer's at %#x with %d slots", ev.Kind, p.DDBuffer, w.Buf, w.Capacity)
	}
	if p.CreationTime.IsZero() || p.ExecutableName == "" {
		t.Fatalf("%v: process metadata missing: %+v", ev.Kind, p)
	}
}

// TestDDOnly: a process with a DD_OTEL_CTX buffer and no process context
// is tracked for its buffer; a context published later joins it, a buffer
// that stops validating leaves it, and it is lost when it has neither.
func TestDDOnly(t *testing.T) {
	forEachLibc(t, func(t *testing.T, libc ddwriter.Libc) {
		f := newFixture(t, scan.Options{DD: scan.DDAll})
		w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: 16, Threads: 1})
		f.own(w.PID)
		evs, st := f.scan()
		ddEvent(t, findEvent(evs, scan.Found, w.PID), w, true, false)
		if st.DDFound != 1 || st.DDTracked != 1 || st.ContextsTracked != 0 {
			t.Fatalf("stats %+v", st)
		}
		// Steady state: one header read, nothing new.
		evs, st = f.poll()
		if len(evs) != 0 || st.DDSearches != 0 || st.Polled != 1 {
			t.Fatalf("poll: %s, %+v", describe(evs), st)
		}
		// The process publishes a context: a forced look (the prctl hook)
		// finds it, the buffer stays.
		w.Context("ddsvc")
		f.s.Rescan(w.PID)
		evs, _ = f.poll()
		ddEvent(t, findEvent(evs, scan.Updated, w.PID), w, true, true)
		// A header that turns bad drops the buffer, not the process.
		w.Header(ddotel.Magic, 2, 16, 32)
		evs, st = f.poll()
		ddEvent(t, findEvent(evs, scan.Updated, w.PID), w, false, true)
		if st.DDLost != 1 {
			t.Fatalf("stats %+v", st)
		}
		w.Header(ddotel.Magic, 1, 16, 32)
		f.s.Rescan(w.PID)
		evs, _ = f.poll()
		ddEvent(t, findEvent(evs, scan.Updated, w.PID), w, true, true)
		w.Quit()
		f.waitEvent(scan.Lost, w.PID)
	})
}

// TestDDLost: a process tracked for its buffer alone is lost when the
// buffer stops validating.
func TestDDLost(t *testing.T) {
	f := newFixture(t, scan.Options{DD: scan.DDAll})
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	f.own(w.PID)
	evs, _ := f.scan()
	ddEvent(t, findEvent(evs, scan.Found, w.PID), w, true, false)
	w.Header(ddotel.Magic, 1, 0xffffffff, 32)
	evs, st := f.poll()
	if findEvent(evs, scan.Lost, w.PID) == nil || st.DDLost != 1 || st.DDTracked != 0 {
		t.Fatalf("bad capacity: %s, %+v", describe(evs), st)
	}
	// Looked at again (forced here): refused, with the reason counted.
	f.s.Rescan(w.PID)
	evs, st = f.poll()
	if len(evs) != 0 || st.DDSearches != 1 || st.DDRefused != 1 {
		t.Fatalf("refused: %s, %+v", describe(evs), st)
	}
}

// TestDDJava: by default only JVM-looking processes are searched: an
// executable named java is, one that maps a libjvm.so is, another is not
// (DDNone: none is).
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
		mode  scan.DDMode
		path  string
		env   []string
		found bool
	}{
		{scan.DDJava, java, nil, true},
		{scan.DDJava, exe, preload, true},
		{scan.DDJava, exe, nil, false},
		{scan.DDNone, java, preload, false},
		{scan.DDAll, exe, nil, true},
	} {
		f := newFixture(t, scan.Options{DD: tc.mode})
		w := ddwriter.StartBinary(t, tc.path, ddwriter.Options{Capacity: 16, Threads: 1, Env: tc.env})
		f.own(w.PID)
		evs, st := f.scan()
		if got := findEvent(evs, scan.Found, w.PID) != nil; got != tc.found {
			t.Errorf("mode %d, %s %v: found %v, want %v (%+v)", tc.mode, filepath.Base(tc.path), tc.env, got, tc.found, st)
		}
		w.Kill()
	}
}

// poll runs one Poll and returns the events of the test's PIDs.
func (f *fixture) poll() ([]scan.Event, scan.Stats) {
	f.t.Helper()
	return f.mine("Poll", f.s.Poll)
}

// TestDDWithContext: a process that publishes a process context and has a
// buffer is found with both at once.
func TestDDWithContext(t *testing.T) {
	f := newFixture(t, scan.Options{DD: scan.DDAll})
	w := ddwriter.Start(t, ddwriter.Musl, ddwriter.Options{Capacity: 16, Threads: 1, Context: "dd-svc"})
	f.own(w.PID)
	evs, st := f.scan()
	ev := findEvent(evs, scan.Found, w.PID)
	ddEvent(t, ev, w, true, true)
	if v := attr(ev.Process.Context.Resource.Attributes, "service.name"); v.Str != "dd-svc" || st.ContextsTracked != 1 || st.DDTracked != 1 {
		t.Fatalf("service.name %+v, stats %+v", v, st)
	}
}
