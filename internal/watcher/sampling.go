// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// chooseThreads makes the thread source thread_sampler chooses and says
// which and why in one Info line (a Warn when it cannot work); an error
// when the choice cannot be had (follow, ebpf: the kernel refused the
// sampler).
func (w *Watcher) chooseThreads() (threadSource, error) {
	cfg := w.cfg.ThreadContext
	log := w.log
	choice := w.cfg.ThreadSampler
	if choice == ThreadSamplerOff {
		log.Info("thread contexts: off (thread_sampler: off)")
		return noThreads{}, nil
	}
	tel := newThreadTelemetry(w.in)
	if choice == ThreadSamplerPtrace {
		if why := hostPrereqs.ptraceProblem(); why != "" {
			log.Warn("thread contexts: ptrace cannot stop threads: "+why+" (thread_sampler: ptrace)",
				zap.Duration("thread_context.interval", cfg.Interval))
		} else {
			log.Info(fmt.Sprintf("thread contexts: ptrace every %v (thread_sampler: ptrace)", cfg.Interval),
				zap.Duration("thread_context.interval", cfg.Interval), zap.Int("thread_context.read_cap", cfg.ReadCap))
		}
		r := newPtraceReader(w.log, cfg, w.catalog, tel, w.cfg.limits())
		r.progress = w.progress
		return r, nil
	}
	opts := w.samplerOptions()
	s, err := newSampler(opts)
	if err != nil {
		// The cause and its fix first: the kernel's EPERM alone reads as
		// "MEMLOCK may be too low" whatever is missing.
		if why := hostPrereqs.ebpfProblem(); why != "" {
			err = fmt.Errorf("%s (%w)", why, err)
		}
		if choice == ThreadSamplerAuto {
			log.Warn(fmt.Sprintf("thread contexts: off: the kernel refused the eBPF sampler: %v. Profile samples get no spans; "+
				"thread_sampler: ptrace reads thread contexts by stopping every thread of every publisher in turn (opt-in)", err))
			return noThreads{}, nil
		}
		return nil, fmt.Errorf("processctx: thread_sampler: %s: %w", choice, err)
	}
	if len(opts.Follow.Programs) == 0 {
		log.Info(fmt.Sprintf("thread contexts: eBPF at own ticks, %d Hz (thread_sampler: %s)", cfg.FrequencyHz, choice),
			zap.Int("thread_context.frequency_hz", cfg.FrequencyHz), zap.Bool("thread_context.off_cpu", cfg.OffCPU),
			zap.Int("thread_context.read_cap", cfg.ReadCap))
	}
	r := newSamplerReader(log, s, w.catalog, tel, newSamplerTelemetry(w.in, tel), w.cfg.limits(), w.cfg.CollectionInterval)
	r.progress = w.progress
	return r, nil
}

// samplerOptions are the eBPF sampler's options for the configuration.
func (w *Watcher) samplerOptions() sampler.Options {
	cfg := w.cfg.ThreadContext
	// The kernel reads at most sampler.MaxReadCap bytes of a record; its
	// recipes map holds one entry per tracked process.
	opts := sampler.Options{FrequencyHz: cfg.FrequencyHz, ReadCap: min(cfg.ReadCap, sampler.MaxReadCap), OffCPU: cfg.OffCPU,
		MaxProcesses: w.cfg.Limits.MaxProcesses, PrctlWindow: w.cfg.MinRescanInterval}
	switch w.cfg.ThreadSampler {
	case ThreadSamplerAuto:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksUnlessFollowing}
	case ThreadSamplerFollow:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksNever}
	}
	if len(opts.Follow.Programs) > 0 {
		opts.Follow.OnChange = followLogger(w.log, w.cfg.ThreadSampler, cfg)
	}
	return opts
}
