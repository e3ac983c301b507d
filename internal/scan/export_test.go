// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

// DropPagemaps closes the pagemap each tracked publisher holds, as when
// opening it failed (EMFILE) at tracking: its polls then open it each time.
func (s *Scanner) DropPagemaps() {
	for _, t := range s.tracked {
		_ = t.pm.Close()
		t.pm = nil
		if t.mem != nil {
			t.mem.UsePagemap(nil)
		}
	}
}
