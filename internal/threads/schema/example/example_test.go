// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package example_test adds a thread-context schema in this one folder, as
// docs/architecture.md's recipe says, and shows the readers handle it
// through the schema.Schema interface with no other file touched: the
// registry finds and checks it, the eBPF sampler takes its recipe, the
// judge of its samples and a ptrace snapshot of its variable give its
// records its source.
package example_test

import (
	"bufio"
	"errors"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Schema is a schema no publisher writes: a TLS variable example_ctx,
// announced by example_v1, pointing at an OTEP 4947 record.
var Schema example

type example struct{}

func (example) Name() string                    { return "example" }
func (example) Source() string                  { return "example-source" }
func (example) SamplerRead() schema.SamplerRead { return schema.ReadRecordPointer }
func (example) Versions() []string              { return []string{"example_v1"} }
func (example) Symbol() string                  { return "example_ctx" }
func (example) Walk(processctx.ThreadLocal, *tlsvar.Location) (*nodectx.Layout, error) {
	return nil, nil
}
func (s example) Check(v schema.Variable) error { return schema.CheckSymbol(v.Location, s.Symbol()) }
func (example) ThreadRecipe(schema.Variable) (schema.SamplerRecipe, error) {
	return schema.SamplerRecipe{Read: schema.ReadRecordPointer}, nil
}

// register is the recipe's registry line, undone when the test ends.
func register(t *testing.T) {
	t.Helper()
	all := registry.All
	registry.All = append(append([]schema.Schema(nil), all...), &Schema)
	t.Cleanup(func() { registry.All = all })
}

// location is where a variable of the schema would be for this machine's
// threads: the thread pointer itself (a static TLS offset of 0).
func location() *tlsvar.Location {
	arch := tlsvar.AMD64
	if runtime.GOARCH == "arm64" {
		arch = tlsvar.ARM64
	}
	return &tlsvar.Location{Symbol: Schema.Symbol(), Arch: arch, Placement: tlsvar.StaticTLS}
}

func TestRegisteredSchemaIsRead(t *testing.T) {
	if m := schema.Missing(&Schema); len(m) > 0 {
		t.Fatalf("the example lacks: %s", strings.Join(m, ", "))
	}
	tl := processctx.ThreadLocal{SchemaVersion: "example_v1"}
	if registry.Announced(tl) {
		t.Fatal("example_v1 announced before the schema is registered")
	}
	register(t)

	// The registry: found by its version, its variable located and checked.
	if s, err := registry.ForVersion("example_v1"); err != nil || s != &Schema {
		t.Fatalf("ForVersion = %v, %v", s, err)
	}
	loc := location()
	v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return loc, nil })
	if err != nil || v.Schema != &Schema || v.Location != loc {
		t.Fatalf("Locate = %+v, %v", v, err)
	}
	other := &tlsvar.Location{Symbol: tlsvar.SymbolName}
	if _, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return other, nil }); !errors.Is(err, schema.ErrSchemaNotHandled) {
		t.Errorf("another schema's variable located: %v", err)
	}

	// The eBPF sampler: the schema's recipe is taken.
	if err := (sampler.Target{PID: 1, Thread: v.Ptr()}).Check(); err != nil {
		t.Errorf("sampler recipe: %v", err)
	}

	// The judge of the sampler's reads: a record read from the variable is
	// an observation with the schema's source.
	var got []attribution.Observation
	judge, err := attribution.NewProcess(attribution.Config{ID: publisher.ProcessID{PID: 7}, Variable: v.Schema,
		Observe: func(_ publisher.ProcessID, o attribution.Observation) { got = append(got, o) }})
	if err != nil {
		t.Fatal(err)
	}
	record := make([]byte, 28)
	record[15], record[23], record[24] = 1, 2, 1 // trace id …01, span id …02, valid
	judge.Add(sampler.Sample{PID: 7, TID: 8, Read: sampler.ReadVariable, Record: record})
	if len(got) != 1 || got[0].Source != Schema.Source() || got[0].Record == nil {
		t.Errorf("observations of a sample: %+v", got)
	}

	// A ptrace snapshot of a real process, once it echoed a line (its
	// thread pointer set): every thread read, with the schema's source
	// (its record, here, is no record).
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	if _, err := io.WriteString(stdin, "up\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("cat echoed %q, %v", line, err)
	}
	threads, _, err := threadread.Snapshot(cmd.Process.Pid, v, threadread.Options{})
	if err != nil || len(threads) == 0 {
		t.Fatalf("snapshot: %d threads, %v", len(threads), err)
	}
	for _, th := range threads {
		if th.Source != Schema.Source() || th.ThreadPointer == 0 {
			t.Errorf("thread %+v: not stopped, or not the schema's source", th)
		}
	}
}
