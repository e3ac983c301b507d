// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

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
	// SamplerAuto: eBPF, reading threads at the samples of the
	// profilers named in follow_programs while one runs, at our own ticks
	// otherwise; off when the kernel refuses eBPF (ptrace stops every
	// thread of every publisher, so it is never chosen silently).
	SamplerAuto = "auto"
	// SamplerFollow: eBPF at a profiler's samples only; Start fails
	// when the kernel cannot follow one.
	SamplerFollow = "follow"
	// SamplerEBPF: the in-kernel sampler at its own ticks only; Start
	// fails when it cannot load.
	SamplerEBPF = "ebpf"
	// SamplerPtrace: a ptrace snapshot of every thread every interval.
	SamplerPtrace = "ptrace"
	// SamplerOff: thread contexts are not read.
	SamplerOff = "off"
)

// Config holds the parameters of the thread samplers (thread_context; the
// choice of sampler is thread_sampler).
type Config struct {
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

// DefaultConfig is thread_context's default.
func DefaultConfig() Config {
	return Config{Interval: 30 * time.Second, ReadCap: threadctx.DefaultReadCap, FrequencyHz: 97,
		FollowPrograms: slices.Clone(DefaultFollowPrograms)}
}

// Validate reports every problem of thread_sampler (choice) and
// thread_context (t).
func Validate(choice string, t Config) []error {
	var errs []error
	switch choice {
	case SamplerAuto, SamplerFollow, SamplerEBPF, SamplerPtrace, SamplerOff:
	default:
		errs = append(errs, fmt.Errorf("thread_sampler must be %q, %q, %q, %q or %q, got %q",
			SamplerAuto, SamplerFollow, SamplerEBPF, SamplerPtrace, SamplerOff, choice))
	}
	if choice == SamplerFollow && len(t.FollowPrograms) == 0 {
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
	} else if t.ReadCap > sampler.MaxReadCap && choice != SamplerPtrace && choice != SamplerOff {
		errs = append(errs, fmt.Errorf("thread_context.read_cap must be at most %d with thread_sampler: %s (the eBPF sampler reads at most %d bytes of a record; "+
			"only ptrace reads up to %d), got %d", sampler.MaxReadCap, choice, sampler.MaxReadCap, maxReadCap, t.ReadCap))
	}
	if t.FrequencyHz < 1 || t.FrequencyHz > maxFrequencyHz {
		errs = append(errs, fmt.Errorf("thread_context.frequency_hz must be in [1, %d], got %d", maxFrequencyHz, t.FrequencyHz))
	}
	return errs
}
