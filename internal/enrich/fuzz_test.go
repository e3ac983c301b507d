// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// fuzzCatalog fills the catalog the fuzz target joins with: processes 100
// (threads 101: two bracketed spans with attributes; 103: an exact
// observation) and 200 (thread 201), as the seeds name them.
func fuzzCatalog(tb testing.TB) *catalog.Catalog {
	c := testCatalog(tb)
	addCheckout(c, 100, t0)
	addProcess(c, 200, t0, "cart", strAttr("service.name", "cart"))
	observe(tb, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"http.route": "/pay"}), t0, t0.Add(time.Second))
	observe(tb, c, 100, 101, span(100, 101, 0xb, 0x2, t0, map[string]string{"http.route": "/refund"}), t0.Add(2*time.Second), t0.Add(3*time.Second))
	observeExact(tb, c, 100, 103, span(100, 103, 0xc, 0x3, t0, nil), t0.Add(4*time.Second))
	observe(tb, c, 200, 201, span(200, 201, 0xd, 0x4, t0, nil), t0, t0.Add(time.Second))
	return c
}

// fuzzSeeds are messages shaped like the profiler's and like the hostile
// and invalid inputs of the tests, serialized as an OTLP
// ExportProfilesServiceRequest.
func fuzzSeeds(tb testing.TB) map[string][]byte {
	at := t0.Add(500 * time.Millisecond)
	seeds := map[string]pprofile.Profiles{}
	// One process on the resource, samples of its threads, one aggregated
	// over both spans.
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)}) // one key: a map's order is random
	b.Sample(p, at, b.Thread(101)...)
	b.Sample(p, t0.Add(4*time.Second+80*time.Microsecond), b.Thread(103)...)
	s := b.Sample(p, at, b.Thread(101)...)
	s.TimestampsUnixNano().Append(uint64(t0.Add(2500 * time.Millisecond).UnixNano()))
	s.Values().FromRaw([]int64{2})
	seeds["resource-pid"] = b.PD
	// PIDs on the samples: two processes, an unknown one, none.
	b = newProfBuilder()
	p = b.Resource(map[string]any{"host.name": "profiler-host"})
	b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", int64(100)))...)
	b.Sample(p, at, append(b.Thread(201), b.Attr("process.pid", "200"))...)
	b.Sample(p, at, append(b.Thread(301), b.Attr("process.pid", int64(300)))...)
	b.Sample(p, at, b.Thread(999)...)
	seeds["sample-pids"] = b.PD
	other := testCatalog(tb) // alternatingMessage fills a catalog too
	seeds["alternating"] = alternatingMessage(tb, other, 16)
	for name, spoil := range spoilers {
		b = newProfBuilder()
		p = b.Resource(map[string]any{"host.name": "h"})
		b.Sample(p, at, append(b.Thread(201), b.Attr("process.pid", int64(200)))...)
		spoil(b, b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", int64(100)))...))
		seeds["invalid-"+name] = b.PD
	}
	out := map[string][]byte{}
	var m pprofile.ProtoMarshaler
	for name, pd := range seeds {
		buf, err := m.MarshalProfiles(pd)
		if err != nil {
			tb.Fatal(err)
		}
		out[name] = buf
	}
	return out
}

// FuzzConsumeProfiles feeds the join any OTLP profiles message (the
// bytes of an ExportProfilesServiceRequest, as a receiver decodes it):
// it must not panic, and a message whose indices are all valid must come
// out valid (tables only appended to, every index in range, no sample or
// timestamp lost).
func FuzzConsumeProfiles(f *testing.F) {
	c := fuzzCatalog(f)
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	p := testPolicy()
	var u pprofile.ProtoUnmarshaler
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := u.UnmarshalProfiles(data)
		if err != nil {
			return
		}
		pd, _ := u.UnmarshalProfiles(data)
		Profiles(c, p, pd)
		if len(validationErrors(in, in)) > 0 {
			return // invalid input: passing without a panic is the contract
		}
		for _, err := range validationErrors(in, pd) {
			t.Error(err)
		}
	})
}

// TestWriteFuzzSeeds writes the fuzz seeds to testdata/fuzz (with -update),
// and checks that the committed corpus holds them.
func TestWriteFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzConsumeProfiles")
	for name, seed := range fuzzSeeds(t) {
		path := filepath.Join(dir, "seed-"+strings.ReplaceAll(name, "/", "-"))
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seed)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != body {
			t.Errorf("%s is not the current seed (go test . -run WriteFuzzSeeds -update rewrites it): %v", path, err)
		}
	}
}
