// SPDX-License-Identifier: Apache-2.0

//go:build linux

package cpulist

import "testing"

// Every Linux has the online CPU list (sysfs).
func TestOnline(t *testing.T) {
	cpus, err := Online()
	if err != nil {
		t.Fatalf("Online: %v", err)
	}
	if len(cpus) == 0 {
		t.Errorf("no online CPUs")
	}
}
