// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"os"
	"testing"
)

func TestSplitLine(t *testing.T) {
	for _, tc := range []struct {
		line       string
		start, end uint64
		name       string
		ok         bool
	}{
		{"7f1c2a000000-7f1c2a001000 rw-p 00000000 00:01 1234    /memfd:OTEL_CTX (deleted)", 0x7f1c2a000000, 0x7f1c2a001000, "/memfd:OTEL_CTX (deleted)", true},
		{"00600000-00602000 rw-p 00000000 00:00 0 ", 0x600000, 0x602000, "", true},
		{"00600000-00602000 rw-p 00000000 00:00 0", 0x600000, 0x602000, "", true},
		{"00600000-00602000 rw-p 00000000 00:00 0   [heap]", 0x600000, 0x602000, "[heap]", true},
		{"garbage", 0, 0, "", false},
		{"0060000g-00602000 rw-p 0 0 0", 0, 0, "", false},
		{"00602000-00600000 rw-p 0 0 0", 0, 0, "", false},
	} {
		start, end, name, ok := splitLine([]byte(tc.line))
		if ok != tc.ok || (ok && (start != tc.start || end != tc.end || string(name) != tc.name)) {
			t.Errorf("splitLine(%q) = %#x %#x %q %v", tc.line, start, end, name, ok)
		}
	}
}

func TestEachSelf(t *testing.T) {
	var n int
	var last uint64
	err := Each("/proc", os.Getpid(), func(start, end uint64, name []byte) {
		if start < last {
			t.Errorf("mapping at %#x after %#x", start, last)
		}
		last = end
		n++
	})
	if err != nil || n == 0 {
		t.Fatalf("Each(self): %d mappings, %v", n, err)
	}
}

func TestSplitFields(t *testing.T) {
	for _, tc := range []struct {
		line  string
		dev   Dev
		inode uint64
		name  string
		ok    bool
	}{
		{"7f1c2a000000-7f1c2a001000 rw-s 00000000 00:01 1234    /memfd:OTEL_CTX (deleted)", Dev{0, 1}, 1234, "/memfd:OTEL_CTX (deleted)", true},
		{"00600000-00602000 r-xp 00001000 fd:1a 18446744073709551615 /usr/bin/x", Dev{0xfd, 0x1a}, 1<<64 - 1, "/usr/bin/x", true},
		{"00600000-00602000 rw-p 00000000 00:00 0", Dev{}, 0, "", true},
		{"00600000-00602000 rw-p 00000000 103:05 77 /a b", Dev{0x103, 5}, 77, "/a b", true},
		{"00600000-00602000 rw-p 00000000 zz 77x /f", Dev{}, 0, "/f", true},
		{"garbage", Dev{}, 0, "", false},
	} {
		l, ok := splitFields([]byte(tc.line))
		if ok != tc.ok || (ok && (l.dev != tc.dev || l.inode != tc.inode || string(l.name) != tc.name)) {
			t.Errorf("splitFields(%q) = %+v %v", tc.line, l, ok)
		}
	}
	b := []byte("7f1c2a000000-7f1c2a001000 rw-s 00000000 00:01 1234    /memfd:OTEL_CTX (deleted)")
	if n := testing.AllocsPerRun(100, func() { _, _ = splitFields(b) }); n != 0 {
		t.Errorf("splitFields allocates %v times per line", n)
	}
}

func TestEachDevSelf(t *testing.T) {
	var anon, files int
	err := EachDev("/proc", os.Getpid(), func(_, _ uint64, dev Dev, inode uint64, name []byte) {
		switch {
		case len(name) == 0:
			anon++
			if dev != (Dev{}) || inode != 0 {
				t.Errorf("anonymous mapping with device %+v inode %d", dev, inode)
			}
		case name[0] == '/':
			files++
			if inode == 0 {
				t.Errorf("file mapping %q without inode", name)
			}
		}
	})
	if err != nil || files == 0 {
		t.Fatalf("EachDev(self): %d anonymous, %d file mappings, %v", anon, files, err)
	}
}
