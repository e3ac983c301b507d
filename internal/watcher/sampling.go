package watcher

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// startThreads chooses the thread sampler (thread_sampler), says which
// and why in one Info line, and starts it.
func (w *Watcher) startThreads(ctx context.Context) error {
	cfg := w.cfg.ThreadContext
	log := w.log
	choice := w.cfg.ThreadSampler
	if choice == ThreadSamplerOff {
		log.Info("thread contexts: off (thread_sampler: off)")
		return nil
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
		w.startPtrace(ctx, tel)
		return nil
	}
	stel := newSamplerTelemetry(w.in, tel)
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
			return nil
		}
		return fmt.Errorf("processctx: thread_sampler: %s: %w", choice, err)
	}
	rescan := make(chan int, rescanQueue)
	w.rescan = rescan
	w.sampler = newSamplerReader(log, s, w.catalog, tel, stel, w.cfg.limits(), rescan, w.cfg.CollectionInterval)
	w.sampler.start(ctx, &w.wg)
	if len(opts.Follow.Programs) == 0 {
		log.Info(fmt.Sprintf("thread contexts: eBPF at own ticks, %d Hz (thread_sampler: %s)", cfg.FrequencyHz, choice),
			zap.Int("thread_context.frequency_hz", cfg.FrequencyHz), zap.Bool("thread_context.off_cpu", cfg.OffCPU),
			zap.Int("thread_context.read_cap", cfg.ReadCap))
	}
	return nil
}

// samplerOptions are the eBPF sampler's options for the configuration.
func (w *Watcher) samplerOptions() sampler.Options {
	cfg := w.cfg.ThreadContext
	// The kernel reads at most sampler.MaxReadCap bytes of a record; its
	// recipes map holds one entry per tracked process.
	opts := sampler.Options{FrequencyHz: cfg.FrequencyHz, ReadCap: min(cfg.ReadCap, sampler.MaxReadCap), OffCPU: cfg.OffCPU,
		MaxProcesses: w.cfg.Limits.MaxProcesses}
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

// startPtrace starts the ptrace snapshot reader.
func (w *Watcher) startPtrace(ctx context.Context, tel *threadTelemetry) {
	dd := newDDSlotReader(w.log, tel)
	w.threads = &threadReader{
		log: w.log, cfg: w.cfg.ThreadContext, catalog: w.catalog,
		cache: tel.newCache(), tel: tel, limits: w.cfg.limits(), now: time.Now,
		logged: map[publisher.ProcessID]bool{}, dd: dd,
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.threads.run(ctx)
	}()
}
