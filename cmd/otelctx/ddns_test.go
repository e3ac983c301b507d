// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// startDDNamespaceFixture starts a ddwriter in its own PID namespace (a
// containerised JVM) whose three workers spin on a CPU, each with its own
// context, at a capacity where every thread's slot differs between its TID
// here and its TID in the namespace. It returns the row each worker's TID
// (here) must show: "trace_id/span_id".
func startDDNamespaceFixture(t *testing.T) (*ddwriter.Writer, map[int]string) {
	t.Helper()
	w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 3})
	want := map[int]string{}
	for i, wt := range w.Threads {
		w.Set(i, 0x10+uint64(i), 0x500+uint64(i), 0x600+uint64(i))
		want[wt.TID] = fmt.Sprintf("%016x%016x/%016x", 0x10+i, 0x500+i, 0x600+i)
		w.Busy(i)
	}
	return w, want
}

// TestThreadsDDInPIDNamespace: otelctx threads (ptrace mode: one read of
// the slots) shows, under each worker's TID here, exactly the context the
// worker wrote in its slot, which it took by its TID in its namespace; the
// main thread has none.
func TestThreadsDDInPIDNamespace(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	w, want := startDDNamespaceFixture(t)
	rows, r := threadsJSON(t, w.PID)
	seen := 0
	for _, th := range rows {
		tid := int(th["tid"].(float64))
		got := fmt.Sprintf("%v/%v", th["trace_id"], th["span_id"])
		switch {
		case want[tid] != "":
			seen++
			if got != want[tid] || th["source"] != publisher.SourceDD {
				t.Errorf("tid %d (capacity %d): %s, want %s:\n%s", tid, w.Capacity, got, want[tid], r.stdout)
			}
		case tid == w.PID:
			if th["reason"] != "empty slot" {
				t.Errorf("main thread: %v", th)
			}
		default:
			t.Errorf("unknown thread %v", th)
		}
	}
	if seen != len(want) {
		t.Errorf("%d of %d workers shown:\n%s", seen, len(want), r.stdout)
	}
}

// TestThreadsEBPFDDInPIDNamespace: otelctx threads --mode ebpf, with the
// real sampler: every run of a worker carries exactly its own context, and
// every worker is seen.
func TestThreadsEBPFDDInPIDNamespace(t *testing.T) {
	samplertest.Require(t)
	testenv.RequirePIDNamespace(t)
	w, want := startDDNamespaceFixture(t)
	seen := map[int]int{}
	sampleUntil(t, "every busy worker sampled", func() bool {
		r := otelctx(t, "threads", "--mode", "ebpf", "--duration", "1s", "--frequency", "997", "--json", strconv.Itoa(w.PID))
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, run := range jsonRows(t, r) {
			tid := int(run["tid"].(float64))
			if want[tid] == "" {
				continue // the main thread, if it ran
			}
			seen[tid]++
			if got := fmt.Sprintf("%v/%v", run["trace_id"], run["span_id"]); got != want[tid] || run["source"] != publisher.SourceDD || run["reason"] != nil {
				t.Errorf("tid %d (capacity %d): run %v, want %s", tid, w.Capacity, run, want[tid])
			}
		}
		if t.Failed() {
			t.Log(strings.TrimSpace(r.stdout))
		}
		for tid := range want {
			if seen[tid] == 0 {
				return false
			}
		}
		return true
	})
}
