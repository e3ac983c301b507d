// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// TestDemoPublisher checks `make run`'s demo (threadpub --demo, built as the
// Makefile builds it: variable in the executable, TLSDESC): its two threads
// switch spans with http.route and http.request.method, as the eBPF
// sampler sees them, and together use well under a CPU.
func TestDemoPublisher(t *testing.T) {
	samplertest.Require(t)
	exe, args := threadpub.Build(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	cmd := exec.Command(exe, append(args, "--demo", "--demo-threads", "2", "--demo-busy", "20")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, fmt.Sprintf("threadpub: demo: pid %d publishes service otelctx-demo; 2 threads", cmd.Process.Pid)) {
		t.Fatalf("demo's first line %q (%v)", line, err)
	}
	pid := cmd.Process.Pid

	loc, err := tlsvar.Resolve("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Track(pid, loc); err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	var mu sync.Mutex
	spans := map[int]map[string]bool{} // tid -> span ids seen
	bad := ""
	enough := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- s.Run(func(x sampler.Sample) {
			if x.Record == nil {
				return
			}
			r, err := threadctx.Parse(x.Record)
			if err != nil {
				return // between spans
			}
			mu.Lock()
			defer mu.Unlock()
			// Key map [http.route, http.request.method, user.id].
			if len(r.Attrs) != 2 || r.Attrs[0].KeyIndex != 0 || !strings.HasPrefix(r.Attrs[0].Value, "/") ||
				r.Attrs[1].KeyIndex != 1 || (r.Attrs[1].Value != "GET" && r.Attrs[1].Value != "POST") {
				bad = fmt.Sprintf("record without route and method: %+v", r.Attrs)
			}
			if spans[x.TID] == nil {
				spans[x.TID] = map[string]bool{}
			}
			spans[x.TID][hex.EncodeToString(r.SpanID[:])] = true
			if len(spans) == 2 {
				n := 0
				for _, m := range spans {
					if len(m) >= 10 {
						n++
					}
				}
				if n == 2 {
					once.Do(func() { close(enough) })
				}
			}
		}, nil)
	}()
	cpu0, wall0 := processCPU(t, pid), time.Now()
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
	}
	cpu, wall := processCPU(t, pid)-cpu0, time.Since(wall0)
	_ = s.Close()
	if err := <-done; err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != "" {
		t.Error(bad)
	}
	counts := []int{}
	for _, m := range spans {
		counts = append(counts, len(m))
	}
	share := cpu.Seconds() / wall.Seconds()
	t.Logf("demo pid %d: span ids seen per thread %v in %v; CPU %.2f of one CPU (2 threads x 20 %% = 0.40 nominal)", pid, counts, wall.Round(time.Millisecond), share)
	if len(counts) != 2 || counts[0] < 10 || counts[1] < 10 {
		t.Errorf("want 2 threads with at least 10 spans each within 30s, got %v", counts)
	}
	if share > 0.8 {
		t.Errorf("the demo used %.2f of a CPU, want about 0.4", share)
	}
}

// processCPU is the process's user+system CPU time from /proc/PID/stat.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	// After ") ": state is field 3, utime 14, stime 15 (1-based in proc(5)).
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}
