package watcher

import (
	"context"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/fakeprof"
	"github.com/otelctx/otelctx/internal/scan/sampler/samplertest"
)

// thread_sampler: follow says which profiler program it follows, and that
// it waits once the program is gone (no own ticks in follow mode).
func TestThreadSamplerFollowLogged(t *testing.T) {
	samplertest.Require(t)
	const name = "otelctx_rcv_fol" // the kernel keeps 15 bytes
	prof, err := fakeprof.Start(97, name)
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close()
	cfg := fastConfig(1 << 22)
	cfg.ThreadSampler = ThreadSamplerFollow
	cfg.ThreadContext.FollowPrograms = []string{name}
	w, logs, err := startObserved(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	lines := func() string { return strings.Join(threadLines(logs), "\n") }
	eventually(t, "a line saying the program is followed", func() bool {
		return strings.Contains(lines(), "thread contexts: eBPF at the samples of "+name+" (BPF program ")
	})
	if strings.Contains(lines(), "own ticks") {
		t.Errorf("follow mode ran own ticks: %s", lines())
	}
	if err := prof.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a line saying it waits for a profiler", func() bool {
		return strings.Contains(lines(), "no profiler program to follow running; waiting for one (thread_sampler: follow)")
	})
}
