// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// TestDiscover: the buffer of a real writer is found among the process's
// anonymous mappings: by name where prctl naming works, else (this
// machine) by its magic.
func TestDiscover(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			for _, capacity := range []int{16, 65536, 100000} {
				w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: capacity, Threads: 1})
				b, st, err := ddscan.Discover("/proc", safemem.New("", w.PID))
				if err != nil {
					t.Fatalf("capacity %d: %v (%+v)", capacity, err, st)
				}
				wantName := ""
				if w.Named {
					wantName = ddscan.NamedMapping
				}
				if b.Addr != w.Buf || b.Capacity != uint32(capacity) || b.MappingName != wantName || st.Valid != 1 {
					t.Fatalf("capacity %d: found %+v (%+v), writer buf %#x named %v", capacity, b, st, w.Buf, w.Named)
				}
				if st.Reads > 3 {
					t.Errorf("capacity %d: %d process_vm_readv calls for %d candidates", capacity, st.Reads, st.Candidates)
				}
				t.Logf("capacity %d: %d candidate mappings, %d reads, %d pagemap entries, %d pages probed inside mappings, named %v",
					capacity, st.Candidates, st.Reads, st.PagemapEntries, st.InsideProbes, w.Named)
				if err := ddscan.Revalidate(safemem.New("", w.PID), b); err != nil {
					t.Fatalf("revalidate: %v", err)
				}
				w.Quit()
			}
		})
	}
}

// TestDiscoverHostile: a header that lies is refused with its reason, the
// refusal costs the same bounded reads, and nothing is sized from it.
func TestDiscoverHostile(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) { testDiscoverHostile(t, libc) })
	}
}

func testDiscoverHostile(t *testing.T, libc ddwriter.Libc) {
	w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: 16, Threads: 1})
	good, _, err := ddscan.Discover("/proc", safemem.New("", w.PID))
	if err != nil {
		t.Fatal(err)
	}
	// The mapping the buffer is in may be larger than its own mmap (merged
	// with a neighbour): one slot more than fits up to its end.
	ms, err := procmaps.FindAnonymous("/proc", w.PID, "", func(m procmaps.Mapping) bool { return m.Start <= w.Buf && w.Buf < m.End })
	if err != nil || len(ms) != 1 {
		t.Fatalf("mapping of %#x: %v %v", w.Buf, ms, err)
	}
	beyond := uint32((ms[0].End-w.Buf)/ddotel.SlotSize) + 1
	for _, tc := range []struct {
		name                               string
		magic, version, capacity, slotSize uint32
		want                               error
	}{
		{"huge_capacity", ddotel.Magic, 1, 0xffffffff, 32, ddotel.ErrBadCapacity},
		{"capacity_beyond_mapping", ddotel.Magic, 1, beyond, 32, ddotel.ErrBadCapacity},
		{"zero_capacity", ddotel.Magic, 1, 0, 32, ddotel.ErrBadCapacity},
		{"bad_version", ddotel.Magic, 2, 16, 32, ddotel.ErrBadVersion},
		{"slot_size_64", ddotel.Magic, 1, 16, 64, ddotel.ErrBadSlotSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.Header(tc.magic, tc.version, tc.capacity, tc.slotSize)
			b, st, err := ddscan.Discover("/proc", safemem.New("", w.PID))
			if !errors.Is(err, ddscan.ErrNotFound) || !errors.Is(err, tc.want) || st.Refused != 1 || st.Valid != 0 {
				t.Fatalf("Discover = %+v, %+v, %v; want not found because %v", b, st, err, tc.want)
			}
			if st.Reads > 3 || st.InsideProbes > ddscan.MaxInsideProbes {
				t.Errorf("%d reads, %d probes", st.Reads, st.InsideProbes)
			}
			// A buffer found before is dropped on its next check.
			if err := ddscan.Revalidate(safemem.New("", w.PID), good); !errors.Is(err, tc.want) {
				t.Fatalf("Revalidate: %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	w.Header(ddotel.Magic, 1, 16, 32)
	if _, _, err := ddscan.Discover("/proc", safemem.New("", w.PID)); err != nil {
		t.Fatalf("restored header: %v", err)
	}
}

// TestDiscoverNamed: where prctl naming works, the mapping is found by its
// name first, whatever else starts with the magic. Naming does not work on
// this project's machines, so a procfs fixture names the real writer's
// buffer mapping and lists a decoy before it; the memory read is the
// writer's.
func TestDiscoverNamed(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	ms, err := procmaps.FindAnonymous("/proc", w.PID, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(w.PID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, m := range ms {
		name := ""
		if m.Start <= w.Buf && w.Buf < m.End {
			// The named mapping is the buffer's own mmap.
			m.Start, m.End, name = w.Buf, w.Buf+4096, ddscan.NamedMapping
		}
		lines = append(lines, fmt.Sprintf("%x-%x rw-p 00000000 00:00 0 %s", m.Start, m.End, name))
	}
	lines = append(lines, fmt.Sprintf("%x-%x r-xp 00000000 fd:01 42 /usr/lib/jvm/lib/server/libjvm.so", 0x1000, 0x2000))
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Residency is the writer's own.
	if err := os.Symlink(fmt.Sprintf("/proc/%d/pagemap", w.PID), filepath.Join(dir, "pagemap")); err != nil {
		t.Fatal(err)
	}
	b, st, err := ddscan.Discover(root, safemem.New(root, w.PID))
	if err != nil || b.Addr != w.Buf || b.MappingName != ddscan.NamedMapping || b.Capacity != 16 {
		t.Fatalf("Discover = %+v, %+v, %v", b, st, err)
	}
	// A named mapping with a bad header is refused like any other.
	w.Header(ddotel.Magic, 1, 16, 64)
	if _, _, err := ddscan.Discover(root, safemem.New(root, w.PID)); !errors.Is(err, ddotel.ErrBadSlotSize) {
		t.Fatalf("named, bad slot size: %v", err)
	}
	w.Header(0, 0, 0, 0)
	if _, st, err := ddscan.Discover(root, safemem.New(root, w.PID)); !errors.Is(err, ddotel.ErrBadMagic) || st.Refused != 1 {
		t.Fatalf("named, no magic: %+v %v", st, err)
	}
}
