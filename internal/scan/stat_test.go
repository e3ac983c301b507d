// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"os"
	"testing"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// TestStatReader reads real stat files: this process's start time is the
// one procstat reads, kthreadd (PID 2) is a kernel thread, and a PID that
// does not exist is gone.
func TestStatReader(t *testing.T) {
	r := statReader{root: "/proc"}
	st, err := r.read(os.Getpid())
	want, werr := procstat.StartTicks("/proc", os.Getpid())
	if err != nil || werr != nil || st.StartTicks != want || st.Flags&procstat.FlagKthread != 0 || len(st.Comm) == 0 {
		t.Fatalf("read(self) = %+v, %v; procstat says %d, %v", st, err, want, werr)
	}
	if st, err := r.read(2); err != nil || st.Flags&procstat.FlagKthread == 0 || string(st.Comm) != "kthreadd" {
		t.Fatalf("read(2) = %+v (comm %q), %v", st, st.Comm, err)
	}
	if _, err := r.read(1 << 30); !errors.Is(err, remote.ErrProcessGone) {
		t.Fatalf("read(missing) = %v, want ErrProcessGone", err)
	}
}
