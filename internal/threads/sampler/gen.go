// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

// The BPF objects are committed (sampler_{x86,arm64}_bpfel.{go,o}) so that
// building needs no clang; `make generate` regenerates them.
//go:generate go run -trimpath github.com/cilium/ebpf/cmd/bpf2go -tags linux -target amd64,arm64 -type sample_event -type prctl_event -type dd_event -type recipe sampler sampler.bpf.c -- -O2 -g -Wall -Werror
