// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tracers_test

import (
	"testing"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/envscan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/tracersvc"
)

// TestEnvironmentNamed: the same Python and Java services without their
// tracer publish nothing; with OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES they get that service and instance as otelctx
// list and the collector's catalog read them from the environment; without
// the variables they get none.
func TestEnvironmentNamed(t *testing.T) {
	testenv.RequireRoot(t)
	jdk := tracersvc.JDK(t, 17)
	pyNamed, javaNamed := tracersvc.UntracedCmds(t, jdk, "OTEL_SERVICE_NAME=otelctx-env-svc", "OTEL_RESOURCE_ATTRIBUTES=service.instance.id=env-1,service.namespace=tracers")
	pyBare, javaBare := tracersvc.UntracedCmds(t, jdk)
	named := map[string]int{
		"python": tracersvc.Start(t, pyNamed).PID,
		"java":   tracersvc.Start(t, javaNamed).PID,
	}
	bare := map[string]int{
		"python": tracersvc.Start(t, pyBare).PID,
		"java":   tracersvc.Start(t, javaBare).PID,
	}
	src, err := envscan.New("/proc")
	if err != nil {
		t.Fatal(err)
	}
	c := catalog.New()
	c.EnableEnvironment(src, 0)
	for lang, pid := range named {
		p, how := c.ProcessFor(pid, 0, 0, catalog.Claims{})
		if how != catalog.Found {
			t.Errorf("%s %d: not found by its environment (%v)", lang, pid, how)
			continue
		}
		if p.MappingAddr != 0 || !catalog.NamedByEnvironment(p) {
			t.Errorf("%s %d: published a context, or not named by its environment", lang, pid)
		}
		got := map[string]string{}
		for _, a := range p.Context.Resource.Attributes {
			got[a.Key] = a.Value.Str
		}
		want := map[string]string{"service.name": "otelctx-env-svc", "service.instance.id": "env-1", "service.namespace": "tracers"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s %d: %s %q, want %q (%v)", lang, pid, k, got[k], v, got)
			}
		}
	}
	for lang, pid := range bare {
		if p, how := c.ProcessFor(pid, 0, 0, catalog.Claims{}); how == catalog.Found {
			t.Errorf("%s %d without the variables: found, environment %v", lang, pid, p.Context.Resource.Attributes)
		}
	}
}
