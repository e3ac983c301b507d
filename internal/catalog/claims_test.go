// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

func TestClaimsContradict(t *testing.T) {
	start := time.Unix(1000, 0)
	p := &publisher.Process{CreationTime: start, ExecutablePath: "/usr/bin/checkout-service", ExecutableName: "checkout-service"}
	p.Context.Resource.Attributes = []processctx.Attribute{{Key: "service.instance.id", Value: processctx.Value{Kind: processctx.KindStr, Str: "i-1"}}}
	for _, tc := range []struct {
		name string
		cl   Claims
		want bool
	}{
		{"no claims", Claims{}, false},
		{"same start, rounded", Claims{CreationTime: start.Add(40 * time.Millisecond)}, false},
		{"another start", Claims{CreationTime: start.Add(time.Second)}, true},
		{"same path", Claims{ExecutablePath: "/usr/bin/checkout-service"}, false},
		{"replaced binary", Claims{ExecutablePath: "/usr/bin/checkout-service (deleted)"}, false},
		{"another path", Claims{ExecutablePath: "/usr/bin/cart"}, true},
		{"the path decides over the name", Claims{ExecutablePath: "/usr/bin/checkout-service", ExecutableName: "x"}, false},
		{"comm, cut at 15 bytes", Claims{ExecutableName: "checkout-servic"}, false},
		{"a shorter prefix is another name", Claims{ExecutableName: "checkout"}, true},
		{"same instance", Claims{ServiceInstanceID: "i-1"}, false},
		{"another instance", Claims{ServiceInstanceID: "i-2"}, true},
	} {
		if got := tc.cl.Contradict(p); got != tc.want {
			t.Errorf("%s: Contradict = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProcessForOneHolder: data spanning an exit and the PID's next holder
// is nobody's, and claims of another process refuse the join.
func TestProcessForOneHolder(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(time.Minute, 10)
	old, exit, successor := replaced(t, c, &now)
	ns := func(t time.Time) int64 { return t.UnixNano() }
	for _, tc := range []struct {
		name     string
		from, to int64
		cl       Claims
		want     *publisher.Process
		how      Lookup
	}{
		{"the old one throughout", ns(exit.Add(-2 * time.Second)), ns(exit), Claims{}, old, Found},
		{"across the exit", ns(exit.Add(-2 * time.Second)), ns(now.Add(time.Second)), Claims{}, nil, OtherHolder},
		{"the successor", ns(now.Add(time.Second)), ns(now.Add(2 * time.Second)), Claims{}, successor, Found},
		{"the successor, claimed to be the old one", ns(now.Add(time.Second)), ns(now.Add(time.Second)), Claims{CreationTime: old.CreationTime}, nil, OtherHolder},
		{"unknown PID", 0, 0, Claims{}, nil, NoProcess},
	} {
		pid := 7
		if tc.how == NoProcess {
			pid = 8
		}
		if p, how := c.ProcessFor(pid, tc.from, tc.to, tc.cl); p != tc.want || how != tc.how {
			t.Errorf("%s: ProcessFor = %v %v, want %v %v", tc.name, p, how, tc.want, tc.how)
		}
	}
}
