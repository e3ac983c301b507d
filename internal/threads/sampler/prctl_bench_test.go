// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// BenchmarkPrctlHookCost is the added cost per syscall of the prctl hook on
// a syscall-bound loop, off its path (no prctl in the loop): getpid (a raw
// syscall, no libc or runtime caching) and 1-byte reads of /dev/zero, with
// no sampler ("none"), with the prctl hook on raw_tracepoint/sys_exit
// ("raw_tracepoint") and on syscalls:sys_exit_prctl ("tracepoint"). The
// samplers keep their own ticks at the default 97 Hz (one BPF run per CPU
// every 10 ms, a few µs: noise here). BENCHMARKS.md records the ratios to
// "none".
//
//	go test -run '^$' -bench PrctlHookCost -count 5 ./internal/threads/sampler
func BenchmarkPrctlHookCost(b *testing.B) {
	testenv.RequireRoot(b)
	ensureTracefs(b)
	zero, err := os.Open("/dev/zero")
	if err != nil {
		b.Fatal(err)
	}
	defer zero.Close()
	fd := int(zero.Fd())
	buf := make([]byte, 1)
	loops := []struct {
		name string
		call func()
	}{
		{"getpid", func() { _, _, _ = syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0) }},
		{"read-dev-zero", func() { _, _ = unix.Read(fd, buf) }},
	}
	base := map[string]float64{} // loop → ns/op without a sampler (last run)
	for _, hook := range []PrctlHook{"none", PrctlHookRawTracepoint, PrctlHookTracepoint} {
		b.Run(string(hook), func(b *testing.B) {
			if hook != "none" {
				opts := Options{}
				if hook == PrctlHookRawTracepoint {
					opts.PrctlHook = PrctlHookRawTracepoint
				}
				s, err := New(opts)
				if errors.Is(err, ErrUnavailable) {
					testenv.Missing(b, err.Error())
				}
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if st, err := s.Stats(); err != nil || st.PrctlHook != hook {
					b.Fatalf("hook %q (%v), want %q", st.PrctlHook, err, hook)
				}
			}
			for _, l := range loops {
				b.Run(l.name, func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						l.call()
					}
					ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
					if hook == "none" {
						base[l.name] = ns
					} else if base[l.name] > 0 {
						// ratio to the same loop without the receiver, and the
						// added cost per syscall
						b.ReportMetric(ns/base[l.name], "x-none")
						b.ReportMetric(ns-base[l.name], "added-ns/syscall")
					}
				})
			}
		})
	}
}
