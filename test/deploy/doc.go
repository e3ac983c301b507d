// Package deploy tests what a person deploying otelctx relies on, outside
// the repository's own workflow: the shipped configuration started from any
// directory, the version, `make help`, the container image, the systemd
// unit and its least-privilege recipe, the Kubernetes manifests, and that
// the repository points at nothing outside itself.
//
// The tests that run the distribution get it through OTELCTX_DIST_BIN, as
// test/e2e does (`make test` sets it).
package deploy
