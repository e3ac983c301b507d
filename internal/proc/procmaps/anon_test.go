// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// A JVM-like maps excerpt: the DD_OTEL_CTX buffer named (where prctl naming
// works), an unnamed one, and every kind of mapping that must be left out.
var anonFixture = strings.Join([]string{
	mapsLine(0x55af4df69000, 0x55af4df8a000, "rw-p", 0, 0, "[heap]"),
	"7f0ad0115000-7f0ad01d9000 rw-p 00000000 00:00 0 ",
	mapsLine(0x7f0ad0200000, 0x7f0ad0401000, "rw-p", 0, 0, "[anon:DD_OTEL_CTX]"),
	mapsLine(0x7f0ad0401000, 0x7f0ad0402000, "rw-p", 0, 0, "[anon:other]"),
	mapsLine(0x7f0ad0402000, 0x7f0ad0403000, "r--p", 0, 0, ""),
	mapsLine(0x7f0ad0403000, 0x7f0ad0404000, "rw-s", 0, 0, "[anon_shmem:DD_OTEL_CTX]"),
	mapsLine(0x7f0ad0404000, 0x7f0ad0405000, "rw-p", 0x1000, 1234, "/usr/lib/jvm/lib/server/libjvm.so"),
	mapsLine(0x7f0ad0405000, 0x7f0ad0406000, "rwxp", 0, 0, ""),
	"7ffd2b9f4000-7ffd2b9f6000 rw-p 00000000 00:00 0                          [stack]",
	"7f0ad0427000-7f0ad0429000 rw-p 00000000 00:00 0",
}, "\n") + "\n"

func TestScanAnonymous(t *testing.T) {
	got, err := scanAnonymous(strings.NewReader(anonFixture), "DD_OTEL_CTX", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{0x7f0ad0115000, 0x7f0ad01d9000, "rw-p", 0, ""},
		{0x7f0ad0200000, 0x7f0ad0401000, "rw-p", 0, "[anon:DD_OTEL_CTX]"},
		{0x7f0ad0427000, 0x7f0ad0429000, "rw-p", 0, ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Without a name only unnamed mappings; accept filters.
	got, _ = scanAnonymous(strings.NewReader(anonFixture), "", func(m Mapping) bool { return m.Size() > 0x2000 })
	if len(got) != 1 || got[0].Start != 0x7f0ad0115000 {
		t.Fatalf("unnamed, > 8 KiB: %+v", got)
	}
	// A malformed rw-p line is an error, not a guess.
	if _, err := scanAnonymous(strings.NewReader("zz-yy rw-p 0 00:00 0\n"), "", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed: %v", err)
	}
	if _, err := scanAnonymous(strings.NewReader("1-2 rw-p "+strings.Repeat("x", chunk)+"\n"), "", nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("long line: %v", err)
	}
}
