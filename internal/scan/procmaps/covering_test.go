package procmaps

import (
	"strings"
	"testing"
)

func TestCovering(t *testing.T) {
	const maps = `00400000-00401000 r-xp 00000000 08:01 100 /bin/x
00600000-00602000 rw-p 00000000 00:00 0 [heap]
00602000-00603000 rw-p 00000000 00:00 0
00700000-00701000 r--p 00000000 00:2d 7 /mnt/fuse/f
`
	for _, tc := range []struct {
		addr, n uint64
		want    string
	}{
		{0x600010, 8, "[heap]"},
		{0x601ff8, 16, "[heap],"},     // into the next (anonymous) mapping
		{0x6ffff8, 16, "/mnt/fuse/f"}, // starts in a gap
		{0x500000, 8, ""},             // a gap
		{^uint64(3), 8, ""},           // wraps
		{0x400000, 0x300001, "/bin/x,[heap],,/mnt/fuse/f"},
	} {
		got, err := covering(strings.NewReader(maps), tc.addr, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range got {
			names = append(names, m.Name)
		}
		if s := strings.Join(names, ","); s != tc.want {
			t.Errorf("covering(%#x, %d) = %q, want %q", tc.addr, tc.n, s, tc.want)
		}
	}
	if _, err := covering(strings.NewReader("garbage\n"), 0, 8); err == nil {
		t.Error("a malformed line was accepted")
	}
}
