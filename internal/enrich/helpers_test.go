// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"flag"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/profiletest"
	"github.com/otelctx/otelctx/internal/watcher"
)

var update = flag.Bool("update", false, "rewrite the expected golden files from the join's output")

var (
	t0           = profiletest.T0
	addProcess   = profiletest.AddProcess
	addCheckout  = profiletest.AddCheckout
	strAttr      = profiletest.StrAttr
	span         = profiletest.Span
	observe      = profiletest.Observe
	observeExact = profiletest.ObserveExact
	cpuTime      = profiletest.CPUTime
)

type profBuilder = profiletest.Builder

func newProfBuilder() *profBuilder { return profiletest.NewBuilder() }

// testCatalog is the empty catalog of a watcher (never started: the tests
// fill the catalog).
func testCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	w, err := watcher.New(watcher.Settings{}, *watcher.NewDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return w.Catalog()
}

// testPolicy is the processor's default configuration.
func testPolicy() *Policy {
	return &Policy{
		MatchWindow:     500 * time.Microsecond,
		PublishedWins:   []string{"service.", "deployment.", "telemetry.sdk."},
		InsertOtherKeys: true,
	}
}

// harness joins messages onto a test catalog and adds up their Counts.
type harness struct {
	t      testing.TB
	cat    *catalog.Catalog
	policy *Policy
	cnt    Counts
}

func newHarness(t testing.TB, c *catalog.Catalog, p *Policy) *harness {
	return &harness{t: t, cat: c, policy: p}
}

// consume joins pd in place.
func (h *harness) consume(pd pprofile.Profiles) {
	c := Profiles(h.cat, h.policy, pd)
	h.cnt.Enriched += c.Enriched
	for i, n := range c.Unmatched {
		h.cnt.Unmatched[i] += n
	}
	for i, n := range c.Invalid {
		h.cnt.Invalid[i] += n
	}
	h.cnt.Joined += c.Joined
	h.cnt.JoinedEnv += c.JoinedEnv
	h.cnt.NoPID += c.NoPID
	h.cnt.NoProcess += c.NoProcess
	h.cnt.PIDReuse += c.PIDReuse
	h.cnt.LookupBudget += c.LookupBudget
	h.cnt.ResourcesSplit += c.ResourcesSplit
	h.cnt.SamplesSplit += c.SamplesSplit
}

// run joins in (a copy is kept to validate the output against) and
// returns it.
func (h *harness) run(in pprofile.Profiles) pprofile.Profiles {
	h.t.Helper()
	orig := pprofile.NewProfiles()
	in.CopyTo(orig)
	h.consume(in)
	validate(h.t, orig, in)
	return in
}

// unmatched is how many samples were left for the reason named r (as the
// processor's metrics label it).
func (h *harness) unmatched(r string) int64 {
	h.t.Helper()
	i := slices.Index(reasonNames[:], r)
	if i < 0 {
		h.t.Fatalf("no reason %q", r)
	}
	return h.cnt.Unmatched[i]
}

// invalid is how many samples were invalid for the reason named r.
func (h *harness) invalid(r string) int64 {
	h.t.Helper()
	i := slices.Index(invalidNames[:], r)
	if i <= 0 {
		h.t.Fatalf("no invalid reason %q", r)
	}
	return h.cnt.Invalid[i]
}

// resourcesUnmatched is how many resources were not joined for the reason
// named r (no_pid, no_process).
func (h *harness) resourcesUnmatched(r string) int64 {
	h.t.Helper()
	switch r {
	case "no_pid":
		return h.cnt.NoPID
	case "no_process":
		return h.cnt.NoProcess
	case "lookup_budget":
		return h.cnt.LookupBudget
	}
	h.t.Fatalf("no resource reason %q", r)
	return 0
}

// checkGolden compares out with testdata/<name>.yaml (rewritten with -update).
func checkGolden(t *testing.T, name string, out pprofile.Profiles) {
	t.Helper()
	path := filepath.Join("testdata", name+".yaml")
	if *update {
		// Marshaling turns the strings of the message it is given into
		// string table references: write a copy.
		cp := pprofile.NewProfiles()
		out.CopyTo(cp)
		if err := golden.WriteProfilesToFile(path, cp); err != nil {
			t.Fatal(err)
		}
	}
	want, err := golden.ReadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprofiletest.CompareProfiles(want, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func pprofiletestCompare(want, got pprofile.Profiles) error {
	return pprofiletest.CompareProfiles(want, got)
}

func pcommonTime(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }

func countSamples(rp pprofile.ResourceProfiles) int {
	n := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			n += p.Samples().Len()
		}
	}
	return n
}
