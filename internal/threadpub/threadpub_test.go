package threadpub_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
	"github.com/otelctx/otelctx/internal/testenv"
	"github.com/otelctx/otelctx/internal/threadpub"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// TestProcessContext: the publisher's OTEP 4719 context carries the
// thread-local reference data a thread-context reader checks first.
func TestProcessContext(t *testing.T) {
	testenv.RequireRoot(t)
	for _, l := range []threadpub.Libc{threadpub.Glibc, threadpub.Musl} {
		t.Run(string(l), func(t *testing.T) {
			p := threadpub.Start(t, threadpub.Cell{Libc: l, Where: threadpub.SharedLib})
			ms, err := procmaps.FindNamed("/proc", p.PID, "OTEL_CTX", nil)
			if err != nil || len(ms) != 1 {
				t.Fatalf("OTEL_CTX mappings %v, %v", ms, err)
			}
			raw, _, err := processctx.ReadRaw(remote.Memory{PID: p.PID}, ms[0].Start, 65536, processctx.DefaultAttempts, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, _, err := processctx.Decode(raw.Payload, processctx.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			if ctx.ThreadLocal.SchemaVersion != threadpub.SchemaVersion || !slices.Equal(ctx.ThreadLocal.AttributeKeyMap, threadpub.KeyMap) {
				t.Fatalf("thread-local data %+v", ctx.ThreadLocal)
			}
		})
	}
}

// TestNoContext: --no-context publishes no process context.
func TestNoContext(t *testing.T) {
	testenv.RequireRoot(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, NoContext: true})
	ms, err := procmaps.FindNamed("/proc", p.PID, "OTEL_CTX", nil)
	if err != nil || len(ms) != 0 {
		t.Fatalf("OTEL_CTX mappings %v, %v", ms, err)
	}
}

// TestCellNames: names are unique across the matrix (they name subtests
// and build directories).
func TestCellNames(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range threadpub.Matrix() {
		if seen[c.String()] || strings.Contains(c.String(), " ") {
			t.Fatalf("cell name %q repeated or with a space", c)
		}
		seen[c.String()] = true
	}
	if len(seen) != 2*(2*4*2+2) {
		t.Fatalf("%d cells", len(seen))
	}
}
