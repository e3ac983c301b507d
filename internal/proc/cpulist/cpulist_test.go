// SPDX-License-Identifier: Apache-2.0

package cpulist

import "testing"

func TestParse(t *testing.T) {
	cpus, err := Parse("0-3,5,7-8")
	if err != nil || len(cpus) != 7 || cpus[4] != 5 || cpus[6] != 8 {
		t.Errorf("Parse: %v %v", cpus, err)
	}
	for _, bad := range []string{"", "x", "3-1", "1-"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}
