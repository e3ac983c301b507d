// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import "github.com/otelctx/otelctx/internal/threadsource"

// Thread samplers (thread_sampler): internal/threadsource's, which says
// what each does.
const (
	ThreadSamplerAuto   = threadsource.SamplerAuto
	ThreadSamplerFollow = threadsource.SamplerFollow
	ThreadSamplerEBPF   = threadsource.SamplerEBPF
	ThreadSamplerPtrace = threadsource.SamplerPtrace
	ThreadSamplerOff    = threadsource.SamplerOff
)

// ThreadContextConfig holds the parameters of the thread samplers
// (thread_context; the choice of sampler is Config.ThreadSampler).
type ThreadContextConfig = threadsource.Config
