// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Settings are what a source reports through and writes to.
type Settings struct {
	Logger *zap.Logger
	// Telemetry is the processctx extension's builder (nil: none).
	Telemetry *processctxtel.TelemetryBuilder
	// Catalog is where the source finds the processes to read and writes
	// what it read.
	Catalog *catalog.Catalog
	// Progress is told when a stage begins and ends (nil: nobody watches).
	Progress Progress
}

// Options are the configuration a source is made for.
type Options struct {
	Sampler string // thread_sampler
	Config  Config // thread_context
	// Limits bound the re-read of a process context when a record uses an
	// unknown key index.
	Limits processctx.Limits
	// MaxProcesses sizes the eBPF sampler's map of tracked processes.
	MaxProcesses int
	// PrctlWindow is the least time between two prctl rescans of a process
	// the kernel hands on (min_rescan_interval).
	PrctlWindow time.Duration
	// SyncEvery is how often the eBPF sampler's processes are synced with
	// the catalog in full (collection_interval).
	SyncEvery time.Duration
}

// newSampler is sampler.New. It is a variable so that a test can make the
// kernel side unavailable on a machine where it loads, to see auto fall
// back (the failure is injected; everything after it is real).
var newSampler = sampler.New

// New makes the source opts.Sampler chooses and says which and why in one
// Info line (a Warn when it cannot work); an error when the choice cannot
// be had (follow, ebpf: the kernel refused the sampler). Nothing runs
// before Start.
func New(set Settings, opts Options) (Source, error) {
	if set.Logger == nil {
		set.Logger = zap.NewNop()
	}
	if set.Telemetry == nil {
		set.Telemetry = processctxtel.NewNopTelemetryBuilder()
	}
	if set.Progress == nil {
		set.Progress = unwatched{}
	}
	cfg, log, choice := opts.Config, set.Logger, opts.Sampler
	if choice == SamplerOff {
		log.Info("thread contexts: off (thread_sampler: off)")
		return None{}, nil
	}
	tel := newTelemetry(set.Telemetry)
	if choice == SamplerPtrace {
		if why := hostPrereqs.ptraceProblem(); why != "" {
			log.Warn("thread contexts: ptrace cannot stop threads: "+why+" (thread_sampler: ptrace)",
				zap.Duration("thread_context.interval", cfg.Interval))
		} else {
			log.Info(fmt.Sprintf("thread contexts: ptrace every %v (thread_sampler: ptrace)", cfg.Interval),
				zap.Duration("thread_context.interval", cfg.Interval), zap.Int("thread_context.read_cap", cfg.ReadCap))
		}
		r := newPtrace(log, cfg, set.Catalog, tel, opts.Limits)
		r.progress = set.Progress
		return r, nil
	}
	sopts := samplerOptions(log, opts)
	s, err := newSampler(sopts)
	if err != nil {
		// The cause and its fix first: the kernel's EPERM alone reads as
		// "MEMLOCK may be too low" whatever is missing.
		if why := hostPrereqs.ebpfProblem(); why != "" {
			err = fmt.Errorf("%s (%w)", why, err)
		}
		if choice == SamplerAuto {
			log.Warn(fmt.Sprintf("thread contexts: off: the kernel refused the eBPF sampler: %v. Profile samples get no spans; "+
				"thread_sampler: ptrace reads thread contexts by stopping every thread of every publisher in turn (opt-in)", err))
			return None{}, nil
		}
		return nil, fmt.Errorf("process_ctx: thread_sampler: %s: %w", choice, err)
	}
	if len(sopts.Follow.Programs) == 0 {
		log.Info(fmt.Sprintf("thread contexts: eBPF at own ticks, %d Hz (thread_sampler: %s)", cfg.FrequencyHz, choice),
			zap.Int("thread_context.frequency_hz", cfg.FrequencyHz), zap.Bool("thread_context.off_cpu", cfg.OffCPU),
			zap.Int("thread_context.read_cap", cfg.ReadCap))
	}
	r := newEBPF(log, s, set.Catalog, tel, opts.Limits, opts.SyncEvery)
	r.progress = set.Progress
	return r, nil
}

// samplerOptions are the eBPF sampler's options for the configuration.
func samplerOptions(log *zap.Logger, o Options) sampler.Options {
	cfg := o.Config
	// The kernel reads at most sampler.MaxReadCap bytes of a record; its
	// recipes map holds one entry per tracked process.
	opts := sampler.Options{FrequencyHz: cfg.FrequencyHz, ReadCap: min(cfg.ReadCap, sampler.MaxReadCap), OffCPU: cfg.OffCPU,
		MaxProcesses: o.MaxProcesses, PrctlWindow: o.PrctlWindow}
	switch o.Sampler {
	case SamplerAuto:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksUnlessFollowing}
	case SamplerFollow:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksNever}
	}
	if len(opts.Follow.Programs) > 0 {
		opts.Follow.OnChange = followLogger(log, o.Sampler, cfg)
	}
	return opts
}
