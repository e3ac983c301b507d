// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestSourceReadsOneProcess: a process named by its environment comes out
// in a publisher's form (its resource as Context.Resource, string values,
// charged as a decoded context), bound to its identity by an exit watch
// that tells its exit; one without the variables names nothing.
func TestSourceReadsOneProcess(t *testing.T) {
	s, err := New("/proc")
	if err != nil {
		t.Fatal(err)
	}
	named := testenv.Sleeper(t, "PATH=/bin", "OTEL_SERVICE_NAME=cart", "OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop")
	pid := named.Process.Pid
	ticks, area, err := s.Holder(pid)
	if err != nil || ticks == 0 || area == ([2]uint64{}) {
		t.Fatalf("holder of %d: %d %v %v", pid, ticks, area, err)
	}
	r := s.Read(pid, ticks)
	if r.Outcome != publisher.EnvironmentReadOK || r.Process == nil || r.Exit == nil {
		t.Fatalf("read: %+v", r)
	}
	p := r.Process
	want := []processctx.Attribute{
		{Key: "service.namespace", Value: processctx.Value{Kind: processctx.KindStr, Str: "shop"}},
		{Key: "service.name", Value: processctx.Value{Kind: processctx.KindStr, Str: "cart"}},
	}
	if !p.FromEnvironment || p.HasContext() || p.ID != (publisher.ProcessID{PID: pid, StartTicks: ticks}) || len(p.Context.Resource.Attributes) != len(want) {
		t.Fatalf("process %+v", p)
	}
	for i, a := range want {
		if got := p.Context.Resource.Attributes[i]; got.Key != a.Key || got.Value.Kind != a.Value.Kind || got.Value.Str != a.Value.Str {
			t.Errorf("attribute %d: %+v, want %+v", i, got, a)
		}
	}
	if p.DecodeStats.DecodedSize <= len("service.namespaceshopservice.namecart") {
		t.Errorf("resource charged %d bytes", p.DecodeStats.DecodedSize)
	}
	if alive, _ := r.Exit.Alive(); !alive {
		t.Fatal("a running process said exited")
	}
	if err := named.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = named.Wait()
	if alive, exited := r.Exit.Alive(); alive || !exited {
		t.Errorf("after its exit: alive %v, exited %v", alive, exited)
	}
	r.Exit.Close() // closed already: a no-op

	bare := testenv.Sleeper(t, "PATH=/bin").Process.Pid
	ticks, _, err = s.Holder(bare)
	if err != nil {
		t.Fatal(err)
	}
	rb := s.Read(bare, ticks)
	if rb.Outcome != publisher.EnvironmentReadOK || rb.Process != nil {
		t.Errorf("a process without the variables: %+v", rb)
	}
	if rb.Exit != nil {
		rb.Exit.Close()
	}
	if r := s.Read(bare, ticks+1); r.Outcome != publisher.EnvironmentFailed {
		t.Errorf("another identity than the PID's holder: %+v", r)
	}
}
