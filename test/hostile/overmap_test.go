package hostile

import (
	"strings"
	"testing"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/telemetrytest"
	"github.com/otelctx/otelctx/internal/testenv"
	"github.com/otelctx/otelctx/internal/threadpub"
)

// TestHeaderOvermappedWithFUSE: publisher A, tracked, maps a page of a FUSE
// file nobody touched over its own header. The poll's stamp read of A must
// be refused (counted as file_backed) rather than wait for the file
// system: the one poll goroutine goes on, so B's update is still read,
// Shutdown returns, and the file system never saw a READ.
func TestHeaderOvermappedWithFUSE(t *testing.T) {
	testenv.RequireRoot(t)
	w := start(t, processctxextension.ThreadSamplerOff)
	a, b, cat, tel := w.a, w.b, w.cat, w.tel

	before := telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed")
	a.Do("overmap %s", w.fs.Path())
	eventually(t, "A's header read refused as file_backed", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed") > before
	})
	eventually(t, "A lost (its context is gone)", func() bool {
		_, ok := cat.Process(a.PID)
		return !ok
	})
	keys := append(append([]string(nil), threadpub.KeyMap...), "hostile.after")
	b.Do("keymap %s", strings.Join(keys, ","))
	eventually(t, "B's update read after A's header was overmapped", func() bool {
		p, ok := cat.Process(b.PID)
		return ok && len(p.Context.ThreadLocal.AttributeKeyMap) == len(keys)
	})
	w.end(t)
}
