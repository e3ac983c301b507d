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
