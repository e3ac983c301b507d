// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/watcher"
)

// TestContextBudget: publishers whose contexts would cost many times their
// payload once decoded (63 KiB of empty nested values; 128 entity
// references naming nested attributes) are refused and counted as
// over_budget, never tracked; an ordinary publisher beside them is tracked
// and its updates read.
func TestContextBudget(t *testing.T) {
	var pids []int
	var hostile []*testpub.Publisher
	for i, load := range [][]string{
		{"nested 2 128 120"},
		{"nested 2 128 120"},
		{"nested 2 16 16", "entityrefs 128"},
	} {
		p := testpub.Start(t, testpub.Glibc)
		p.Set("service.name", "hostile", "service.instance.id", string(rune('a'+i)))
		for _, cmd := range load {
			p.Do("%s", cmd)
		}
		p.Publish()
		hostile = append(hostile, p)
		pids = append(pids, p.PID)
	}
	ordinary := testpub.Start(t, testpub.Glibc)
	ordinary.Set("service.name", "ordinary")
	ordinary.Publish()
	pids = append(pids, ordinary.PID)

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ext, wat := startExtension(t, config(processctxextension.ThreadSamplerOff, pids...), tel)
	defer func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	cat := wat.Catalog()
	eventually(t, "every hostile context refused as over_budget", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "over_budget") >= int64(len(hostile))
	})
	eventually(t, "the ordinary publisher tracked", func() bool {
		_, ok := cat.Process(ordinary.PID)
		return ok
	})
	for _, p := range hostile {
		if _, ok := cat.Process(p.PID); ok {
			t.Errorf("hostile publisher %d tracked", p.PID)
		}
	}
	ordinary.Set("service.version", "2")
	ordinary.Publish()
	eventually(t, "the ordinary publisher's update read", func() bool {
		p, ok := cat.Process(ordinary.PID)
		return ok && len(p.Context.Resource.Attributes) == 2
	})
}

// TestInvalidUTF8Published: a publisher's invalid UTF-8 (in a resource key
// and value) is replaced by U+FFFD before the context reaches the catalog
// (and from it pdata), and counted; the extension's debug log, with this
// publisher, one whose executable's name holds a newline, an escape
// sequence and invalid UTF-8, and one over its budget, holds no raw byte
// of theirs.
func TestInvalidUTF8Published(t *testing.T) {
	p := testpub.Start(t, testpub.Glibc)
	p.Set("service.name", "bad-utf8")
	p.Do("badutf8 hostile.key")
	p.Publish()
	exe := filepath.Join(t.TempDir(), "pub\n\x1b[31mred\xff")
	if err := os.Link(testpub.Build(t, testpub.Glibc), exe); err != nil {
		b, err := os.ReadFile(testpub.Build(t, testpub.Glibc))
		if err == nil {
			err = os.WriteFile(exe, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	named := testpub.StartBinary(t, exe)
	named.Set("service.name", "named")
	named.Do("badutf8 k")
	named.Do("schema tlsdesc_v1_dev") // the ptrace sampler looks for its TLS variable
	named.Publish()
	over := testpub.Start(t, testpub.Glibc)
	over.Do("nested 2 128 120")
	over.Publish()

	var log lockedBuffer
	logger := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), &log, zap.DebugLevel))
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	f := processctxextension.NewFactory()
	set := extensiontest.NewNopSettings(f.Type())
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = logger
	ext, err := f.Create(context.Background(), set, config(processctxextension.ThreadSamplerPtrace, p.PID, named.PID, over.PID))
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	cat := ext.(watcher.Provider).Watcher().Catalog()
	eventually(t, "both publishers tracked, the third refused", func() bool {
		_, a := cat.Process(p.PID)
		_, b := cat.Process(named.PID)
		return a && b && telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "over_budget") > 0
	})
	proc, _ := cat.Process(p.PID)
	v, ok := processctx.Lookup(proc.Context.Resource.Attributes, "hostile.key\uFFFD")
	if !ok || v.Str != "ok\uFFFD" {
		t.Fatalf("resource attributes %+v", proc.Context.Resource.Attributes)
	}
	eventually(t, "the replaced strings counted", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_invalid_utf8", "source", "process_context") >= 4
	})
	if err := ext.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	out := log.String()
	if !utf8.ValidString(out) {
		t.Errorf("the log holds invalid UTF-8:\n%q", out)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.ContainsFunc(line, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) {
			t.Errorf("a log line holds a control character: %q", line)
		}
	}
	if !strings.Contains(out, "invalid UTF-8 replaced") {
		t.Errorf("no debug line for the replaced strings:\n%s", out)
	}
}

// lockedBuffer is a zapcore.WriteSyncer for a test's log.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Sync() error { return nil }

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestInvalidUTF8ThreadRecord: a thread's record attribute value with
// invalid UTF-8 reaches the catalog (and from it ctx_enrich) with U+FFFD in
// its place, counted as thread_record.
func TestInvalidUTF8ThreadRecord(t *testing.T) {
	testenv.RequireRoot(t)
	b := startWellBehaved(t)
	tid, err := strconv.Atoi(b.Do("set 0 0af7651916cd43dd8448eb211c80319c b7ad6b7169203331 1 0=ok\xff\xfe 1=GET")[0])
	if err != nil {
		t.Fatal(err)
	}
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ext, wat := startExtension(t, config(processctxextension.ThreadSamplerPtrace, b.PID), tel)
	defer func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	eventually(t, "the thread's record in the catalog", func() bool {
		_, _, ok := wat.Catalog().Thread(b.PID, tid)
		return ok
	})
	rec, _, _ := wat.Catalog().Thread(b.PID, tid)
	if rec.Attributes["http.route"] != "ok\uFFFD" || rec.Attributes["http.request.method"] != "GET" {
		t.Fatalf("attributes %q", rec.Attributes)
	}
	eventually(t, "the replaced value counted", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_invalid_utf8", "source", "thread_record") > 0
	})
}
