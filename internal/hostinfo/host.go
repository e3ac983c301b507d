// SPDX-License-Identifier: Apache-2.0

// Package hostinfo says where a process runs: the host's identity
// (host.id, host.name) and, from a process's cgroup path, its container
// and Kubernetes pod. Entity events go to a gateway that sees every node.
package hostinfo

import (
	"os"
	"strings"
)

// Host is the identity of the host the collector watches.
type Host struct {
	ID, Name string
}

// Where the host keeps its identity, tried in order: the host's own root
// directory as its PID 1 sees it (the collector runs in the host PID
// namespace, also in a container), then the collector's, then the
// firmware's (sysfs is not namespaced).
func idFiles(procRoot string) []string {
	return []string{procRoot + "/1/root/etc/machine-id", "/etc/machine-id", "/sys/class/dmi/id/product_uuid"}
}

func nameFiles(procRoot string) []string {
	return []string{procRoot + "/1/root/etc/hostname"}
}

// HostOf reads the host's identity under procRoot (normally /proc);
// fields it cannot read are empty, except the name, which falls back to
// the collector's hostname (the host's with hostNetwork).
func HostOf(procRoot string) Host {
	h := Host{ID: firstLine(idFiles(procRoot)), Name: firstLine(nameFiles(procRoot))}
	if h.Name == "" {
		h.Name, _ = os.Hostname()
	}
	return h
}

// maxIdentityFile bounds the read of an identity file (a 33-byte
// machine-id, a hostname of at most 64 bytes).
const maxIdentityFile = 256

// firstLine is the first non-empty first line of the files, trimmed.
func firstLine(paths []string) string {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		b := make([]byte, maxIdentityFile)
		n, _ := f.Read(b)
		_ = f.Close()
		line, _, _ := strings.Cut(string(b[:n]), "\n")
		if line = strings.TrimSpace(line); line != "" && line != "uninitialized" {
			return line
		}
	}
	return ""
}
