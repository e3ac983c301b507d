// SPDX-License-Identifier: Apache-2.0

//go:build linux

package bootclock

import "testing"

// TestBootToWallNarrowest: a read descheduled between its wall-clock reads
// (here 4 ms wide, its boot read late) must not set the offset; the
// narrowest read does.
func TestBootToWallNarrowest(t *testing.T) {
	const trueOffset = 1_700_000_000_000_000_000
	reads := [][3]int64{
		{trueOffset + 1_000_000, 1_000_000 + 3_900_000, trueOffset + 5_000_000}, // 4 ms wide, boot read 3.9 ms in
		{trueOffset + 6_000_000, 6_000_100, trueOffset + 6_000_200},             // 200 ns wide
		{trueOffset + 7_000_000, 7_000_000 + 900_000, trueOffset + 8_000_000},   // 1 ms wide
	}
	i := 0
	read := func() (int64, int64, int64, bool) {
		r := reads[i%len(reads)]
		i++
		return r[0], r[1], r[2], true
	}
	off, ok := bootToWall(read)
	if !ok {
		t.Fatal("no offset")
	}
	if d := off - trueOffset; d < -100 || d > 100 {
		t.Errorf("offset off by %d ns, want within the narrowest read's half width (100 ns)", d)
	}
	if i != clockTries {
		t.Errorf("%d reads, want %d", i, clockTries)
	}
	if _, ok := bootToWall(func() (int64, int64, int64, bool) { return 0, 0, 0, false }); ok {
		t.Error("a failed read gave an offset")
	}
}
