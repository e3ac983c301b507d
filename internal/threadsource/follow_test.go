// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
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
	cfg.ThreadSampler = SamplerFollow
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

// The thread-context source gauge and the followed sample rate through a
// profiler's start: own ticks while its program is loaded without perf
// events, hrtimer (or fentry) from its first samples with followed
// samples per second above 0, own ticks while it is paused (its program
// loaded), its method again once it resumes, own ticks again once it is
// unloaded.
func TestFollowSourceGauges(t *testing.T) {
	samplertest.Require(t)
	const name = "otelctx_gauge_p"
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	truth := p.Set(0, threadpub.Record{TraceID: [16]byte{0x0a}, SpanID: [8]byte{0xb7}, Flags: 1})
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(p.PID)
	cfg.ThreadSampler = SamplerAuto
	cfg.ThreadContext.FollowPrograms = []string{name}
	_, w, cat := startSource(t, cfg, tel)
	// Where it says it reads (the watcher records it as the
	// thread_context_source gauge every round: TestThreadSourceChosen).
	source := func(want string) func() bool {
		return func() bool { return w.Current() == want }
	}
	eventually(t, "source own_ticks, no profiler", source(AtOwnTicks))

	prof, err := fakeprof.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close()
	eventually(t, "the loaded program followed", func() bool {
		st := samplerOf(t, w).s.FollowStatus()
		return len(st.Programs) == 1 && st.Programs[0].ID == uint32(prof.ID())
	})
	eventually(t, "source still own_ticks, no followed sample yet", source(AtOwnTicks))

	if err := prof.Attach(fakeprof.CPUClock, 997); err != nil {
		t.Fatal(err)
	}
	method := ""
	eventually(t, "source hrtimer or fentry", func() bool {
		method = samplerOf(t, w).s.FollowStatus().Method
		return method != "" && source(method)()
	})
	eventually(t, "followed samples per second above 0", func() bool {
		p.Do("spin 0 20")
		v, ok := telemetrytest.Gauge(tel, "otelcol_processctx_thread_samples_followed_rate", "", "")
		return ok && v > 0
	})
	if _, _, ok := cat.Thread(p.PID, truth.TID); !ok {
		t.Errorf("worker's record not in the catalog")
	}
	// Paused with its program loaded: own ticks after 2 s of silence, the
	// followed method again once it samples.
	if err := prof.Pause(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source own_ticks, profiler paused", source(AtOwnTicks))
	if err := prof.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source "+method+" again, profiler resumed", source(method))
	if err := prof.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source own_ticks again, profiler unloaded", source(AtOwnTicks))
	t.Logf("method %s", method)
}
