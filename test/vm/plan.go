// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

// Marker starts every console line guestinit writes; the rest of the
// console (kernel messages) is kept for the failure report.
// Marker+"run NAME" opens a test binary's output, "out NAME LINE" carries
// one line of it, "exit NAME CODE SECONDS" closes it.
const Marker = "@@otelctx-vm "

// Run is one test binary run by guestinit: its guest path, its arguments,
// its working directory (its package's directory, for relative testdata
// paths) and extra environment entries.
type Run struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
}

// Plan is guestinit's /plan.json.
type Plan struct {
	Runs   []Run    `json:"runs"`
	Env    []string `json:"env"`
	Sysctl []string `json:"sysctl"` // "key/path=value" under /proc/sys
	// Kallsyms: a device guestinit copies /proc/kallsyms's text symbols to
	// before the runs (with kernel/kptr_restrict=0), "" for none.
	Kallsyms string `json:"kallsyms"`
}
