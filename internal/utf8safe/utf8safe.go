// SPDX-License-Identifier: Apache-2.0

// Package utf8safe holds the one rule for text read from other processes
// on its way into pdata: invalid UTF-8 is replaced by U+FFFD (a run of
// invalid bytes by one), so that a strict consumer never rejects a batch,
// other processes' data included, for one publisher's bytes. The readers
// apply it where they parse (and count what they replaced); pdataconv
// applies it again on every string it writes.
package utf8safe

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// Replacement replaces invalid UTF-8.
const Replacement = "\uFFFD"

// String returns s, or s with its invalid UTF-8 replaced and true.
func String(s string) (string, bool) {
	if utf8.ValidString(s) {
		return s, false
	}
	return strings.ToValidUTF8(s, Replacement), true
}

// Bytes returns b itself, or a copy with its invalid UTF-8 replaced and
// true.
func Bytes(b []byte) ([]byte, bool) {
	if utf8.Valid(b) {
		return b, false
	}
	return bytes.ToValidUTF8(b, []byte(Replacement)), true
}
