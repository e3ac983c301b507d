// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/samplertest"
)

// shippedCaps are the capabilities of the row marked *shipped* in
// docs/requirements.md's table of capabilities per kernel family, sorted.
func shippedCaps(t *testing.T) []string {
	t.Helper()
	doc := readRepoFile(t, "docs/requirements.md")
	_, table, ok := strings.Cut(doc, "## Capabilities per kernel family")
	if !ok {
		t.Fatal("docs/requirements.md has no section \"Capabilities per kernel family\"")
	}
	var rows []string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "|") && strings.Contains(l, "*shipped*") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("docs/requirements.md: %d rows marked *shipped*, want 1", len(rows))
	}
	cells := strings.Split(rows[0], "|")
	if len(cells) < 4 {
		t.Fatalf("docs/requirements.md: shipped row %q has no capabilities column", rows[0])
	}
	var caps []string
	for _, m := range regexp.MustCompile("`(CAP_[A-Z_]+)`").FindAllStringSubmatch(cells[2], -1) {
		caps = append(caps, m[1])
	}
	slices.Sort(caps)
	if len(caps) == 0 {
		t.Fatalf("docs/requirements.md: no capability in the shipped row %q", rows[0])
	}
	return caps
}

// TestCapabilitiesTable: the DaemonSet, the image test's podman line (what
// docs/deploy.md shows) and the systemd unit grant the shipped row of
// docs/requirements.md's capabilities per kernel family, and the unit sets
// nothing that takes away what the hrtimer follow method needs
// (ProtectKernelLogs= removes CAP_SYSLOG, ProtectKernelTunables= hides
// /proc/kallsyms).
func TestCapabilitiesTable(t *testing.T) {
	want := shippedCaps(t)
	s := kubeManifests(t)
	var ds []string
	for _, a := range s.container.SecurityContext.Capabilities.Add {
		ds = append(ds, "CAP_"+string(a))
	}
	slices.Sort(ds)
	if !slices.Equal(ds, want) {
		t.Errorf("DaemonSet capabilities.add %v, docs/requirements.md ships %v", ds, want)
	}
	var img []string
	for _, c := range strings.Split(imageCaps, ",") {
		img = append(img, "CAP_"+c)
	}
	slices.Sort(img)
	if !slices.Equal(img, want) {
		t.Errorf("the image's --cap-add %v, docs/requirements.md ships %v", img, want)
	}
	if !strings.Contains(readRepoFile(t, "docs/deploy.md"), "--cap-add="+imageCaps) {
		t.Errorf("docs/deploy.md does not show --cap-add=%s", imageCaps)
	}
	unit := readRepoFile(t, unitPath)
	for _, key := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		got := strings.Fields(unitKey(t, unit, key))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s %s %v, docs/requirements.md ships %v", unitPath, key, got, want)
		}
	}
	// internal/threadsource follows a profiler with samplertest's copy of the
	// unit's capabilities, in test/vm's guests too.
	tested := slices.Sorted(maps.Keys(samplertest.UnitCapabilities))
	if got := strings.Fields(unitKey(t, unit, "AmbientCapabilities")); !slices.Equal(tested, slices.Sorted(slices.Values(got))) {
		t.Errorf("samplertest.UnitCapabilities %v, the unit grants %v", tested, got)
	}
	for _, key := range []string{"ProtectKernelLogs", "ProtectKernelTunables"} {
		if regexp.MustCompile(`(?m)^` + key + `=`).MatchString(unit) {
			t.Errorf("%s sets %s=, which takes away what the hrtimer follow method needs", unitPath, key)
		}
	}
}
