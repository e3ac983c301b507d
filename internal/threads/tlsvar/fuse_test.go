// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar_test

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testfuse"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// A file of a FUSE mount mapped at offset 0 looks like a module, but any
// touch of it waits for the file system's server, which a publisher may run
// itself: the resolver must not read it.
func TestSkipsFUSEModules(t *testing.T) {
	fs := testfuse.Mount(t, make([]byte, 64<<10))
	fd, err := unix.Open(fs.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, 64<<10, unix.PROT_READ, unix.MAP_SHARED)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) }) // before the unmount (cleanups run last-in first-out)

	done := make(chan error, 1)
	go func() {
		_, err := tlsvar.NewResolver("/proc").Resolve(os.Getpid())
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("resolution of this process: %v", err)
	case <-time.After(30 * time.Second): // a deadlock check, not a performance bound
		t.Fatalf("the resolution has not returned after 30s (%d READs of the FUSE file held)", fs.Pending())
	}
	// Only this process's: a profiler on the host may read the mapping too.
	if r := fs.ReadsBy(os.Getpid()); len(r) != 0 {
		t.Errorf("the resolver read the FUSE file: %+v", r)
	}
}

func TestMapsDev(t *testing.T) {
	for in, want := range map[string]string{"0:52": "00:34", "253:1": "fd:01", "8:17": "08:11", "0:419": "00:1a3"} {
		if got, ok := tlsvar.MapsDev(in); !ok || got != want {
			t.Errorf("MapsDev(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := tlsvar.MapsDev("x:1"); ok {
		t.Error("MapsDev accepted x:1")
	}
}
