// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
)

// envHost holds the process_ctx extensions of TestEnrichEnvironmentNamed.
var envHost = watchertest.NewHost()

// envFloor is the share of a process's samples that must get the service
// its environment names.
const envFloor = 0.999

// TestEnrichEnvironmentNamed: C processes (glibc and musl) that publish no
// process context and set only OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, sampled by a stand-in profiler (perf_event BPF
// at 997 Hz on every CPU) beside one that sets neither: each named process
// gets its service and attributes on at least envFloor of its samples
// through the process_ctx extension's default configuration and ctx_enrich,
// and no other process's sample gets them.
func TestEnrichEnvironmentNamed(t *testing.T) {
	testenv.RequireRoot(t)
	type proc struct {
		pid     int
		service string // "" names none
	}
	var procs []proc
	for _, libc := range testpub.Libcs {
		bin := testpub.CompileC(t, testpub.Compiler(t, libc), "envspin-"+string(libc), testenv.RepoRoot()+"/test/enrich/testdata/envspin.c", "-O2", "-Wall")
		svc := "env-" + libc.Name()
		procs = append(procs, proc{pid: startEnv(t, bin, "OTEL_SERVICE_NAME="+svc,
			"OTEL_RESOURCE_ATTRIBUTES=service.namespace=measure,deployment.environment.name=env%20test"), service: svc})
	}
	bare := testpub.CompileC(t, testpub.Compiler(t, testpub.Glibc), "envspin-"+string(testpub.Glibc), testenv.RepoRoot()+"/test/enrich/testdata/envspin.c", "-O2", "-Wall")
	procs = append(procs, proc{pid: startEnv(t, bare, "PATH=/bin")})

	id := component.MustNewIDWithName("process_ctx", "environ")
	w, err := watcher.New(watcher.Settings{}, *watcher.NewDefaultConfig()) // the default: environment_resource on
	if err != nil {
		t.Fatal(err)
	}
	envHost.Add(id, w)

	prof, err := fakeprof.Start(997, "otelctx_envprof")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	const least = 1000
	testenv.EventuallyCPU(t, fmt.Sprintf("%d samples of each process", least), func() bool {
		n := map[int]int{}
		for _, s := range prof.Samples() {
			n[s.PID]++
		}
		return !slices.ContainsFunc(procs, func(p proc) bool { return n[p.pid] < least })
	})
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	samples := prof.Samples()
	slices.SortFunc(samples, func(a, b fakeprof.Sample) int { return a.Time.Compare(b.Time) })

	// Messages of 5 s of samples each, as the OTel eBPF profiler reports
	// (without naming resources itself): one ResourceProfiles, the PID on
	// each sample.
	got := map[int]map[string]int{} // pid → service (or "") → samples
	for from := 0; from < len(samples); {
		b := newMessage()
		p := b.resource()
		end := samples[from].Time.Add(5 * time.Second)
		i := from
		for ; i < len(samples) && samples[i].Time.Before(end); i++ {
			s := samples[i]
			b.sample(p, s.Time, s.PID, s.TID)
		}
		from = i
		out := enrichWith(t, envHost, id, b.pd)
		for r, rp := range out.ResourceProfiles().All() {
			res := rp.Resource().Attributes().AsRaw()
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, s := range pr.Samples().All() {
						pid := samplePID(out, s, res)
						svc, _ := res["service.name"].(string)
						if svc != "" && (res["service.namespace"] != "measure" || res["deployment.environment.name"] != "env test") {
							t.Errorf("resource %d: %v", r, res)
						}
						if got[pid] == nil {
							got[pid] = map[string]int{}
						}
						got[pid][svc]++
					}
				}
			}
		}
	}
	named := map[string]int{}
	for _, p := range procs {
		named[p.service] = p.pid
	}
	for pid, by := range got {
		for svc, n := range by {
			if owner, ok := named[svc]; ok && svc != "" && owner != pid {
				t.Errorf("%d samples of pid %d got %q, pid %d's service", n, pid, svc, owner)
			}
		}
	}
	for _, p := range procs {
		total := 0
		for _, n := range got[p.pid] {
			total += n
		}
		right := got[p.pid][p.service]
		rate := float64(right) / float64(total)
		t.Logf("pid %d (%q): %d of %d samples (%.4f)", p.pid, p.service, right, total, rate)
		if rate < envFloor {
			t.Errorf("pid %d: %.4f of its samples got %q, want at least %.3f (%v)", p.pid, rate, p.service, envFloor, got[p.pid])
		}
	}
}

// startEnv starts bin with exactly env and waits for it to run.
func startEnv(t *testing.T, bin string, env ...string) int {
	t.Helper()
	p := testpub.RunProcEnv(t, "envspin", 10*time.Second, env, bin)
	if l := p.ReadLine(); l != "ready" {
		t.Fatalf("envspin: %q", l)
	}
	return p.PID
}

// samplePID is the PID of a sample: its process.pid attribute, else its
// resource's.
func samplePID(pd pprofile.Profiles, s pprofile.Sample, res map[string]any) int {
	d := pd.Dictionary()
	for _, i := range s.AttributeIndices().All() {
		kv := d.AttributeTable().At(int(i))
		if d.StringTable().At(int(kv.KeyStrindex())) == "process.pid" {
			return int(kv.Value().Int())
		}
	}
	pid, _ := res["process.pid"].(int64)
	return int(pid)
}

// message builds a profiles message the way the OTel eBPF profiler does.
type message struct {
	pd   pprofile.Profiles
	dict pprofile.ProfilesDictionary
}

func newMessage() *message {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	return &message{pd: pd, dict: d}
}

func (m *message) attr(k string, v int64) int32 {
	kv := pprofile.NewKeyValueAndUnit()
	ks, err := pprofile.SetString(m.dict.StringTable(), k)
	if err != nil {
		panic(err)
	}
	kv.SetKeyStrindex(ks)
	kv.Value().SetInt(v)
	i, err := pprofile.SetAttribute(m.dict.AttributeTable(), kv)
	if err != nil {
		panic(err)
	}
	return i
}

func (m *message) resource() pprofile.Profile {
	rp := m.pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", hostName())
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	st, _ := pprofile.SetString(m.dict.StringTable(), "samples")
	p.SampleType().SetTypeStrindex(st)
	return p
}

func (m *message) sample(p pprofile.Profile, at time.Time, pid, tid int) {
	s := p.Samples().AppendEmpty()
	s.Values().Append(1)
	s.TimestampsUnixNano().Append(uint64(pcommon.NewTimestampFromTime(at)))
	s.AttributeIndices().Append(m.attr("process.pid", int64(pid)), m.attr("thread.id", int64(tid)))
}

func hostName() string {
	h, _ := os.Hostname()
	return h
}
