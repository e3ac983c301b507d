// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"slices"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestKeyMapRefresher: the refresher reads the key map a real publisher
// has now, at the mapping it was found at; at an address that maps
// nothing it fails.
func TestKeyMapRefresher(t *testing.T) {
	testenv.RequireRoot(t)
	pub := testpub.Start(t, testpub.Glibc)
	pub.Do("schema tlsdesc_v1_dev")
	pub.Do("keymap http.route")
	addr, _ := pub.Publish()
	ticks, err := procstat.StartTicks("/proc", pub.PID)
	if err != nil {
		t.Fatal(err)
	}
	p := &publisher.Process{ID: publisher.ProcessID{PID: pub.PID, StartTicks: ticks}, MappingAddr: addr,
		Context: processctx.Context{ThreadLocal: processctx.ThreadLocal{AttributeKeyMap: []string{"http.route"}}}}
	refresh := KeyMapRefresher("", p, processctx.DefaultLimits())

	pub.Do("keymap http.route,tenant.id")
	if a, _ := pub.Publish(); a != addr {
		t.Fatalf("updated at %#x, not in place at %#x", a, addr)
	}
	km, err := refresh()
	if err != nil || !slices.Equal(km, []string{"http.route", "tenant.id"}) {
		t.Fatalf("refreshed key map %q, %v", km, err)
	}

	gone := *p
	gone.MappingAddr = 0x1000 // the first page: never mapped
	if km, err := KeyMapRefresher("", &gone, processctx.DefaultLimits())(); err == nil {
		t.Errorf("a key map read where nothing is mapped: %q", km)
	}
}
