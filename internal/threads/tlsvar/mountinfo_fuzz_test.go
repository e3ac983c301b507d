// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseMountGuard: whatever a process's mountinfo says (its mounts are
// its own to make, in its own namespaces), parsing ends without a panic,
// keeps at most one mount per line, and the guard refuses every mount it
// read as FUSE and every mount it did not list.
func FuzzParseMountGuard(f *testing.F) {
	for _, s := range []string{
		"36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
		"22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n" +
			"40 22 0:45 / /dev/zero rw,nosuid,nodev - fuse.hang hang rw,user_id=0,group_id=0\n",
		"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:50 / /x rw - fuseblk /dev/sdb rw\n3 1 0:51 / /y rw shared:7 - fuse src rw\n",
		"7 1 0:5 / /a\\040b rw - tmpfs tmpfs rw\n - \n8 - x\n18446744073709551615 1 4294967295:4294967295 / / rw - fuse.x x rw\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, info string) {
		mem := newMemBudget(context.Background())
		defer mem.release()
		g, err := parseMountGuard(strings.NewReader(info), mem)
		if err != nil {
			return // a line past the scanner's bound, or past the resolution's memory budget
		}
		lines := strings.Count(info, "\n") + 1
		if len(g.known) > lines || len(g.fuse) > len(g.known) || len(g.overlay) > len(g.known) || len(g.fuseDevs) > len(g.fuse) {
			t.Fatalf("%d lines: %d known, %d FUSE (%d devices), %d overlay mounts", lines, len(g.known), len(g.fuse), len(g.fuseDevs), len(g.overlay))
		}
		for id := range g.fuse {
			if g.check(id) == nil {
				t.Fatalf("FUSE mount %d passes the guard", id)
			}
		}
		for id := range g.overlay {
			if len(g.fuse) > 0 && g.check(id) == nil {
				t.Fatalf("overlay mount %d passes in a namespace with FUSE mounts", id)
			}
		}
		for _, line := range strings.Split(info, "\n") {
			id, err := strconv.ParseUint(strings.Fields(line + " x")[0], 10, 64)
			if err == nil && !g.known[id] && g.check(id) == nil {
				t.Fatalf("mount %d not listed, passes the guard", id)
			}
		}
	})
}
