// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testfuse_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LongLived...)
}

// wait bounds every wait for something that must happen.
const wait = 10 * time.Second

func content() []byte {
	b := make([]byte, 3*4096+100)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

type result struct {
	n   int
	err error
}

// pread reads p at off of path in a goroutine; its result arrives on the
// channel.
func pread(t *testing.T, path string, p []byte, off int64) <-chan result {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ch := make(chan result, 1)
	go func() {
		n, err := f.ReadAt(p, off)
		ch <- result{n, err}
	}()
	return ch
}

// received waits for the server to hold a READ.
func received(t *testing.T, fs *testfuse.FS) testfuse.ReadRequest {
	t.Helper()
	select {
	case r := <-fs.ReadReceived():
		return r
	case <-time.After(wait):
		t.Fatalf("no READ request within %v", wait)
	}
	return testfuse.ReadRequest{}
}

func TestReadBlocksUntilRelease(t *testing.T) {
	fs := testfuse.Mount(t, content())
	p := make([]byte, 100)
	done := pread(t, fs.Path(), p, 4096+50)
	req := received(t, fs)
	// The READ is held by the server, so the pread cannot have returned.
	select {
	case r := <-done:
		t.Fatalf("pread returned %d, %v while its READ was held", r.n, r.err)
	default:
	}
	if n := fs.Pending(); n != 1 {
		t.Fatalf("pending READs: %d, want 1", n)
	}
	if req.PID != os.Getpid() || req.TID == 0 || req.Offset > 4096+50 || req.Offset+uint64(req.Size) < 4096+150 {
		t.Errorf("READ %+v does not cover the range read", req)
	}
	fs.Release()
	select {
	case r := <-done:
		if r.err != nil || r.n != len(p) {
			t.Fatalf("pread: %d, %v", r.n, r.err)
		}
	case <-time.After(wait):
		t.Fatalf("pread still blocked %v after Release", wait)
	}
	if want := content()[4096+50 : 4096+150]; !bytes.Equal(p, want) {
		t.Errorf("read %x, want %x", p[:8], want[:8])
	}
	if fs.Pending() != 0 || len(fs.Reads()) == 0 {
		t.Errorf("after Release: %d pending, %d reads", fs.Pending(), len(fs.Reads()))
	}
}

// TestAnswerAfter: with AnswerAfter, a READ is answered on its own after
// the delay (no Release), with the file's bytes.
func TestAnswerAfter(t *testing.T) {
	fs := testfuse.Mount(t, content())
	fs.AnswerAfter(50 * time.Millisecond)
	p := make([]byte, 100)
	start := time.Now()
	done := pread(t, fs.Path(), p, 50)
	received(t, fs)
	select {
	case r := <-done:
		if r.err != nil || r.n != len(p) {
			t.Fatalf("pread: %d, %v", r.n, r.err)
		}
	case <-time.After(wait):
		t.Fatalf("pread still blocked %v after its READ, answered after 50ms", wait)
	}
	t.Logf("READ answered after %v (delay 50ms)", time.Since(start))
	if want := content()[50:150]; !bytes.Equal(p, want) {
		t.Errorf("read %x, want %x", p[:8], want[:8])
	}
	if n := fs.Pending(); n != 0 {
		t.Errorf("pending READs after the delay: %d", n)
	}

}

func TestCloseFailsHeldRead(t *testing.T) {
	fs := testfuse.Mount(t, content())
	done := pread(t, fs.Path(), make([]byte, 10), 0)
	received(t, fs)
	fs.Close()
	select {
	case r := <-done:
		if r.err == nil {
			t.Fatalf("pread of an aborted connection: %d bytes, no error", r.n)
		}
	case <-time.After(wait):
		t.Fatalf("pread still blocked %v after Close", wait)
	}
	fs.Close() // idempotent, as the cleanup calls it again
}

func TestNames(t *testing.T) {
	fs := testfuse.Mount(t, content())
	st, err := os.Stat(fs.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() || st.Size() != int64(len(content())) {
		t.Errorf("%s: mode %v size %d", fs.Path(), st.Mode(), st.Size())
	}
	if _, err := os.Stat(filepath.Join(fs.Dir(), "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of a name not served: %v, want ErrNotExist", err)
	}
	if len(fs.Reads()) != 0 {
		t.Errorf("lookups and stat sent READs: %+v", fs.Reads())
	}
}

// mapUntouched maps the file without touching it: its address.
func mapUntouched(fs *testfuse.FS) uint64 {
	return uint64(uintptr(unsafe.Pointer(&fs.MapUntouched()[0])))
}

// A process_vm_readv of a mapped, never-touched page faults it in through
// the server: it waits for Release. This is what a reader of a hostile
// publisher's pointer would do.
func TestRemoteReadOfMappingBlocks(t *testing.T) {
	fs := testfuse.Mount(t, content())
	addr := mapUntouched(fs)
	done := make(chan error, 1)
	p := make([]byte, 16)
	go func() { done <- remote.Memory{PID: os.Getpid()}.ReadAt(p, addr+4096) }()
	received(t, fs)
	select {
	case err := <-done:
		t.Fatalf("process_vm_readv returned (%v) while its READ was held", err)
	default:
	}
	fs.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatalf("process_vm_readv still blocked %v after Release", wait)
	}
	if !bytes.Equal(p, content()[4096:4096+16]) {
		t.Errorf("read %x", p)
	}
}

// safemem refuses the same read without sending the server anything: the
// page is not resident.
func TestSafememRefusesUntouchedMapping(t *testing.T) {
	fs := testfuse.Mount(t, content())
	addr := mapUntouched(fs)
	err := safemem.New("", os.Getpid()).ReadAt(make([]byte, 16), addr+4096)
	if !errors.Is(err, safemem.ErrFileBacked) {
		t.Fatalf("safemem read of an untouched FUSE page: %v, want ErrFileBacked", err)
	}
	if r := fs.ReadsBy(os.Getpid()); len(r) != 0 {
		t.Fatalf("the server got READs from this process: %+v", r)
	}
}
