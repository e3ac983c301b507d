// SPDX-License-Identifier: Apache-2.0

// Package envscan is the discovery of what a process's environment names:
// the resource an OpenTelemetry SDK takes from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, read from /proc/PID/environ with a time bound
// (Reader), the PID's holder and its image told by its stat, and its exit
// by a pidfd (Source). The catalog keeps what Source gives, bounded; its
// owner (the watcher, the CLI) hands it a Source.
package envscan
