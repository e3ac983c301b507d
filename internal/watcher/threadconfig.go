// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Thread samplers (thread_sampler).
const (
	// ThreadSamplerAuto: eBPF, reading threads at the samples of the
	// profilers named in follow_programs while one runs, at our own ticks
	// otherwise; off when the kernel refuses eBPF (ptrace stops every
	// thread of every publisher, so it is never chosen silently).
	ThreadSamplerAuto = "auto"
	// ThreadSamplerFollow: eBPF at a profiler's samples only; Start fails
	// when the kernel cannot follow one.
	ThreadSamplerFollow = "follow"
	// ThreadSamplerEBPF: the in-kernel sampler at its own ticks only; Start
	// fails when it cannot load.
	ThreadSamplerEBPF = "ebpf"
	// ThreadSamplerPtrace: a ptrace snapshot of every thread every interval.
	ThreadSamplerPtrace = "ptrace"
	// ThreadSamplerOff: thread contexts are not read.
	ThreadSamplerOff = "off"
)

// ThreadContextConfig holds the parameters of the thread samplers (the
// choice of sampler is Config.ThreadSampler).
type ThreadContextConfig struct {
	// Mode is the former place of the sampler choice; it is refused with a
	// pointer to thread_sampler rather than silently ignored.
	Mode string `mapstructure:"mode"`
	// Interval is the ptrace snapshot period.
	Interval time.Duration `mapstructure:"interval"`
	// ReadCap bounds the bytes read of one record, header included (both
	// samplers).
	ReadCap int `mapstructure:"read_cap"`
	// FrequencyHz is the eBPF sampler's sampling frequency per CPU.
	FrequencyHz int `mapstructure:"frequency_hz"`
	// OffCPU makes the eBPF sampler also read the record of a publishing
	// thread when it is switched out.
	OffCPU bool `mapstructure:"off_cpu"`
	// FollowPrograms names the perf_event BPF programs of profilers whose
	// samples are followed (auto and follow).
	FollowPrograms []string `mapstructure:"follow_programs"`
}

// DefaultFollowPrograms is the OTel eBPF profiler's sampling program.
var DefaultFollowPrograms = []string{"native_tracer_entry"}

// Bounds of the thread-context configuration.
const (
	minThreadInterval = 100 * time.Millisecond
	maxReadCap        = threadctx.HeaderSize + 65535 // attrs_data_size is a u16
	maxFrequencyHz    = 10000
	// maxProgramName bounds a BPF function name (KSYM_NAME_LEN is 512).
	maxProgramName = 512
)

func defaultThreadContextConfig() ThreadContextConfig {
	return ThreadContextConfig{Interval: 30 * time.Second, ReadCap: threadctx.DefaultReadCap, FrequencyHz: 97,
		FollowPrograms: slices.Clone(DefaultFollowPrograms)}
}

func validateThreads(choice string, t ThreadContextConfig) []error {
	var errs []error
	switch choice {
	case ThreadSamplerAuto, ThreadSamplerFollow, ThreadSamplerEBPF, ThreadSamplerPtrace, ThreadSamplerOff:
	default:
		errs = append(errs, fmt.Errorf("thread_sampler must be %q, %q, %q, %q or %q, got %q",
			ThreadSamplerAuto, ThreadSamplerFollow, ThreadSamplerEBPF, ThreadSamplerPtrace, ThreadSamplerOff, choice))
	}
	if choice == ThreadSamplerFollow && len(t.FollowPrograms) == 0 {
		errs = append(errs, errors.New("thread_sampler: follow needs thread_context.follow_programs (e.g. [native_tracer_entry])"))
	}
	for i, n := range t.FollowPrograms {
		if n == "" || len(n) > maxProgramName {
			errs = append(errs, fmt.Errorf("thread_context.follow_programs[%d]: %q is not a BPF program name (1-%d bytes)", i, n, maxProgramName))
		}
	}
	if t.Mode != "" {
		errs = append(errs, fmt.Errorf("thread_context.mode is replaced by thread_sampler (auto, follow, ebpf, ptrace or off): "+
			"write thread_sampler: %s and remove thread_context.mode", t.Mode))
	}
	if t.Interval < minThreadInterval {
		errs = append(errs, fmt.Errorf("thread_context.interval must be at least %v, got %v", minThreadInterval, t.Interval))
	}
	if t.ReadCap < threadctx.HeaderSize || t.ReadCap > maxReadCap {
		errs = append(errs, fmt.Errorf("thread_context.read_cap must be in [%d, %d], got %d", threadctx.HeaderSize, maxReadCap, t.ReadCap))
	} else if t.ReadCap > sampler.MaxReadCap && choice != ThreadSamplerPtrace && choice != ThreadSamplerOff {
		errs = append(errs, fmt.Errorf("thread_context.read_cap must be at most %d with thread_sampler: %s (the eBPF sampler reads at most %d bytes of a record; "+
			"only ptrace reads up to %d), got %d", sampler.MaxReadCap, choice, sampler.MaxReadCap, maxReadCap, t.ReadCap))
	}
	if t.FrequencyHz < 1 || t.FrequencyHz > maxFrequencyHz {
		errs = append(errs, fmt.Errorf("thread_context.frequency_hz must be in [1, %d], got %d", maxFrequencyHz, t.FrequencyHz))
	}
	return errs
}
