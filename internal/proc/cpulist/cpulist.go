// SPDX-License-Identifier: Apache-2.0

// Package cpulist reads the kernel's lists of CPUs ("0-3,5,7-8"), as in
// /sys/devices/system/cpu/online.
package cpulist

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Online parses /sys/devices/system/cpu/online.
func Online() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	return Parse(strings.TrimSpace(string(b)))
}

// Parse parses a CPU list: comma-separated CPUs and ranges ("0-3,5,7-8"),
// at least one CPU.
func Parse(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, fmt.Errorf("cpu list %q: no CPUs", s)
	}
	return cpus, nil
}
