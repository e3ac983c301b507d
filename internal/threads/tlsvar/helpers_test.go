// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"os"
	"testing"
)

// parseBytes parses an in-memory file with no memory accounting.
func parseBytes(b []byte) (*elfFacts, error) {
	return parseELF(bytes.NewReader(b), uint64(len(b)), nil)
}

func parseFile(t testing.TB, f *os.File) (*elfFacts, error) {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return parseELF(f, uint64(fi.Size()), nil)
}
