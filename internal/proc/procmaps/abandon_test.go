// SPDX-License-Identifier: Apache-2.0

//go:build linux

package procmaps

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// abandonedReader is a maps file whose read was abandoned (lockread.File
// after ErrTimeout): the read still owns the buffer it was handed.
type abandonedReader struct{ buf *byte }

func (r *abandonedReader) Read(p []byte) (int, error) {
	r.buf = &p[0]
	return 0, lockread.ErrTimeout
}

func (*abandonedReader) Abandoned() bool { return true }

// TestAbandonedChunkNotReused: the chunk handed to an abandoned read is
// not put back in the pool (the read may still write into it), so no later
// maps read gets it.
func TestAbandonedChunkNotReused(t *testing.T) {
	r := &abandonedReader{}
	if err := eachLine(r, func([]byte) bool { return true }); !errors.Is(err, lockread.ErrTimeout) {
		t.Fatalf("eachLine: %v, want the read's ErrTimeout", err)
	}
	for range 16 {
		bp := chunks.Get().(*[]byte)
		if &(*bp)[0] == r.buf {
			t.Fatal("the abandoned read's chunk came back from the pool")
		}
		defer chunks.Put(bp)
	}
}

var runs int

// TestEachLineTimesOut: a maps read that blocks (here a pipe no one writes
// to, standing for a process that holds its mmap lock) fails with the
// read timeout (lockread), and FindNamed as well, without waiting for it.
func TestEachLineTimesOut(t *testing.T) {
	// Above pid_max (2^22): no process of the host, whose reads other
	// tests make, shares its quarantine; a new one at each run (-count).
	runs++
	pid := 1<<22 + runs
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "maps"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(filepath.Join(dir, "maps"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	remote.SetReadTimeout(50 * time.Millisecond)
	t.Cleanup(func() {
		// Each abandoned read returns with a line of its own.
		for range 2 {
			_, _ = w.Write([]byte("0-1000 r--p 00000000 00:00 0\n"))
		}
		testenv.Eventually(t, "the abandoned reads returned", func() bool { return lockread.Stalls().Hung == 0 })
		_ = w.Close()
		remote.SetReadTimeout(0)
	})
	err = EachLine(root, pid, func(*Line) { t.Error("a line from a read that timed out") })
	if !errors.Is(err, lockread.ErrTimeout) {
		t.Errorf("EachLine of a blocked maps: %v, want lockread.ErrTimeout", err)
	}
	// Quarantined now: refused at once.
	if _, err := FindNamed(root, pid, "", nil); !lockread.Stalled(err) {
		t.Errorf("FindNamed of the quarantined process: %v, want a stall", err)
	}
}
