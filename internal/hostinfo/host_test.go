// SPDX-License-Identifier: Apache-2.0

package hostinfo

import (
	"os"
	"path/filepath"
	"testing"
)

// The host's machine-id through its PID 1's root comes first; an empty or
// uninitialized one is skipped; the name falls back to os.Hostname.
func TestHostOf(t *testing.T) {
	root := t.TempDir()
	etc := filepath.Join(root, "1", "root", "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("machine-id", "0123456789abcdef0123456789abcdef\n")
	write("hostname", "node-7\n")
	if h := HostOf(root); h.ID != "0123456789abcdef0123456789abcdef" || h.Name != "node-7" {
		t.Errorf("HostOf = %+v", h)
	}
	write("machine-id", "uninitialized\n")
	write("hostname", "")
	own, _ := os.Hostname()
	h := HostOf(root)
	if h.Name != own {
		t.Errorf("name %q, want the collector's %q", h.Name, own)
	}
	if h.ID == "uninitialized" {
		t.Error("an uninitialized machine-id was taken")
	}
	// The real host: root reads its own machine-id (or the firmware's UUID).
	if os.Geteuid() == 0 {
		if real := HostOf("/proc"); real.ID == "" || real.Name == "" {
			t.Errorf("this host: %+v", real)
		}
	}
}
