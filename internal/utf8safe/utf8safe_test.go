// SPDX-License-Identifier: Apache-2.0

package utf8safe

import "testing"

func TestReplaced(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		replaced bool
	}{
		{"", "", false},
		{"service.name", "service.name", false},
		{"€é😀", "€é😀", false},
		{"ok\xff\xfe", "ok\uFFFD", true},
		{"\xc3", "\uFFFD", true},             // a cut two-byte sequence
		{"a\xed\xa0\x80b", "a\uFFFDb", true}, // a UTF-16 surrogate
		{"\xc0\xaf", "\uFFFD", true},         // overlong '/'
	} {
		got, replaced := String(tc.in)
		if got != tc.want || replaced != tc.replaced {
			t.Errorf("String(%q) = %q, %v; want %q, %v", tc.in, got, replaced, tc.want, tc.replaced)
		}
		b, replaced := Bytes([]byte(tc.in))
		if string(b) != tc.want || replaced != tc.replaced {
			t.Errorf("Bytes(%q) = %q, %v; want %q, %v", tc.in, b, replaced, tc.want, tc.replaced)
		}
	}
}
