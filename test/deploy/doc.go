// SPDX-License-Identifier: Apache-2.0

// Package deploy tests what a person deploying otelctx relies on, outside
// the repository's own workflow: the shipped configuration started from any
// directory, the version, `make help`, the multi-arch container image, the
// systemd unit (verified, and run under systemd with its sandbox and
// reload) and its least-privilege recipe, the production configuration
// (validated, run with and without BTF, SIGHUP), the Kubernetes manifests
// (decoded strictly; OTLP only from the node), the released-profiler
// recipe, that no document shows a refused configuration key, and that the
// repository points at nothing outside itself.
//
// The tests that run the distribution get it through OTELCTX_DIST_BIN, as
// test/e2e does (`make test` sets it).
package deploy
