// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// followLogger says, in one Info line at start and one per change, where
// thread contexts are read: at which profiler programs' samples and how, or
// at our own ticks and why.
func followLogger(log *zap.Logger, choice string, cfg Config) func(sampler.FollowStatus) {
	first := true
	return func(st sampler.FollowStatus) {
		msg := "thread contexts: " + describeFollow(st, cfg) + " (thread_sampler: " + choice + ")"
		fields := []zap.Field{zap.Strings("thread_context.follow_programs", cfg.FollowPrograms)}
		if st.Err != nil {
			fields = append(fields, zap.NamedError("follow_error", st.Err))
		}
		if st.Fallback != nil {
			fields = append(fields, zap.NamedError("fentry_refused", st.Fallback))
		}
		if first {
			first = false
			fields = append(fields, zap.Int("thread_context.frequency_hz", cfg.FrequencyHz),
				zap.Bool("thread_context.off_cpu", cfg.OffCPU), zap.Int("thread_context.read_cap", cfg.ReadCap))
		}
		// A status with an error means following is off (a missing
		// capability, a method the kernel refuses): the user has something
		// to fix.
		if st.Err != nil {
			log.Warn(msg, fields...)
			return
		}
		log.Info(msg, fields...)
	}
}

func describeFollow(st sampler.FollowStatus, cfg Config) string {
	var b strings.Builder
	if len(st.Programs) > 0 {
		b.WriteString("eBPF at the samples of ")
		for i, p := range st.Programs {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s (BPF program %d, %s", p.Name, p.ID, p.Method)
			if p.NoFentry != "" {
				b.WriteString(": " + p.NoFentry)
			}
			switch {
			case p.Silent:
				b.WriteString(", silent")
			case !p.Sampled:
				b.WriteString(", no sample yet")
			}
			b.WriteString(")")
		}
	} else {
		b.WriteString("no profiler program to follow running")
		if st.Method == "" {
			b.WriteString(", and the kernel cannot follow one")
		}
	}
	switch {
	case st.OwnTicks && len(st.Programs) > 0 && !anySampled(st) && anySilent(st):
		fmt.Fprintf(&b, "; own ticks at %d Hz until it samples again", cfg.FrequencyHz)
	case st.OwnTicks && len(st.Programs) > 0 && !anySampled(st):
		fmt.Fprintf(&b, "; own ticks at %d Hz until its first sample", cfg.FrequencyHz)
	case st.OwnTicks:
		fmt.Fprintf(&b, "; own ticks at %d Hz", cfg.FrequencyHz)
	case len(st.Programs) == 0:
		b.WriteString("; waiting for one")
	}
	return b.String()
}

func anySampled(st sampler.FollowStatus) bool {
	for _, p := range st.Programs {
		if p.Sampled {
			return true
		}
	}
	return false
}

func anySilent(st sampler.FollowStatus) bool {
	for _, p := range st.Programs {
		if p.Silent {
			return true
		}
	}
	return false
}
