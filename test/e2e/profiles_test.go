// SPDX-License-Identifier: Apache-2.0

//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// TestDistributionProfiles runs the built distribution the way `make run`
// does for a profiler: process_ctx (eBPF thread sampler) in a logs pipeline,
// and otlp -> ctx_enrich -> file in a profiles pipeline, with
// --feature-gates=service.profilesSupport. A publisher's worker switches
// spans; an OTLP profile shaped like the OTel eBPF profiler's (one sample
// in the middle of each span, thread.id and a timestamp) is sent over
// OTLP/gRPC (what the profiler uses) and over OTLP/HTTP (protobuf), and
// what the file exporter writes must carry the publisher's service.name
// on the resource and each sample's span as its link.
func TestDistributionProfiles(t *testing.T) {
	bin := testenv.DistBinary(t)
	testenv.RequireRoot(t) // process_vm_readv, BPF
	testenv.RequireTool(t, "gcc")

	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	tid := p.Info(0).TID
	// Own ticks observe the worker only while it runs: on a host shared with
	// other busy tests it could miss whole halves of its 50 ms spans and
	// leave their middles unbracketed (unlinked, never wrong). A higher
	// priority keeps it on the CPU for most of each span; as root only.
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, -15); err != nil {
		t.Logf("worker %d keeps its priority: %v", tid, err)
	}

	dir := t.TempDir()
	entities, profiles := filepath.Join(dir, "entities.jsonl"), filepath.Join(dir, "profiles.jsonl")
	endpoint, grpcEndpoint := freeAddr(t), freeAddr(t)
	col := startCollector(t, bin, dir, distrun.Config{
		PIDs: []int{p.PID}, CollectionInterval: 200 * time.Millisecond, ThreadSampler: "ebpf", FrequencyHz: 997,
		EntityInterval: time.Minute, Entities: entities,
		Profiles: &distrun.Profiles{GRPC: grpcEndpoint, HTTP: endpoint, Path: profiles},
	})
	col.waitFor(t, entities, "entity_state for the publisher (pid "+fmt.Sprint(p.PID)+")",
		func(e event) bool { return e.typ == eventState && e.pid == int64(p.PID) })

	url := "http://" + endpoint + "/v1development/profiles"
	httpc := &http.Client{Timeout: 5 * time.Second}
	// ProfilesData and ExportProfilesServiceRequest share their fields
	// (resource_profiles = 1, dictionary = 2): the marshalled data is the
	// request body.
	exportHTTP := func(pd pprofile.Profiles) error {
		var m pprofile.ProtoMarshaler
		body, err := m.MarshalProfiles(pd)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := httpc.Post(url, "application/x-protobuf", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %q", url, resp.Status, msg)
		}
		return nil
	}
	conn, err := grpc.NewClient(grpcEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcc := pprofileotlp.NewGRPCClient(conn)
	exportGRPC := func(pd pprofile.Profiles) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := grpcc.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
		return err
	}
	sent := 0
	// send exports one profile with a sample of the worker at each time and
	// returns the sample links the collector wrote for it.
	send := func(t *testing.T, export func(pprofile.Profiles) error, times []int64) []string {
		t.Helper()
		sent++
		marker := fmt.Sprintf("e2e-%d", sent)
		req := profileOf(p.PID, tid, marker, times)
		deadline := time.Now().Add(eventTimeout)
		for {
			err := export(req)
			if err == nil {
				break
			}
			if col.Exited() || time.Now().After(deadline) {
				t.Fatalf("exporting a profile to %s: %v", endpoint, err)
			}
			time.Sleep(pollEvery) // the receiver may still be starting: retry pace
		}
		for {
			if links, ok := readProfileLinks(t, profiles, marker); ok {
				return links
			}
			if col.Exited() || time.Now().After(deadline) {
				t.Fatalf("profile %s never reached %s", marker, profiles)
			}
			time.Sleep(pollEvery) // polling the exporter's file
		}
	}
	// probe: the worker publishes a marker record and spins until a sample
	// taken now is linked to it: the sampler tracks the worker and has
	// delivered everything before.
	probe := func(t *testing.T, span [8]byte) {
		t.Helper()
		p.Set(0, threadpub.Record{TraceID: [16]byte{0xee}, SpanID: span, Flags: 1})
		want := hex.EncodeToString(span[:])
		for range 200 {
			p.Do("spin 0 20")
			if links := send(t, exportGRPC, []int64{time.Now().Add(-10 * time.Millisecond).UnixNano()}); len(links) == 1 && links[0] == want {
				return
			}
		}
		t.Fatalf("a sample of the spinning worker was never linked to its record %s", want)
	}
	probe(t, [8]byte{0xee, 1})
	// A starved run (few links) is measured again; a wrong link fails at once.
	testenv.MeasureFloors(t, func(t *testing.T) (misses []string) {
		path := filepath.Join(t.TempDir(), "truth")
		p.Switch(0, 20, 50, path)
		p.Wait(0)
		truth, err := threadpub.ReadSwitchTruth(path)
		if err != nil {
			t.Fatal(err)
		}
		probe(t, [8]byte{0xee, 2})

		var times []int64
		for _, s := range truth.Spans {
			times = append(times, s.RealStart+(s.RealEnd-s.RealStart)/2)
		}
		for _, tr := range []struct {
			name   string
			export func(pprofile.Profiles) error
		}{{"OTLP/gRPC", exportGRPC}, {"OTLP/HTTP", exportHTTP}} {
			links := send(t, tr.export, times)
			// Precision must hold: a sample is linked to its own span or to
			// none. Recall depends on the sampler seeing the worker at those
			// ticks, which a busy host can delay: it is logged, and only a
			// few are required.
			matched, wrong := 0, 0
			for i, s := range truth.Spans {
				switch {
				case i >= len(links) || links[i] == "":
				case links[i] == s.SpanID:
					matched++
				default:
					wrong++
				}
			}
			t.Logf("profile through the distribution over %s: %d of %d samples (middles of 50 ms spans) linked to their span, %d to another", tr.name, matched, len(truth.Spans), wrong)
			if wrong > 0 {
				t.Errorf("%s: %d of %d samples linked to another span (want none); links %v", tr.name, wrong, len(truth.Spans), links)
			}
			if matched < 5 {
				misses = append(misses, fmt.Sprintf("%s: %d of %d samples linked to their span, want at least 5", tr.name, matched, len(truth.Spans)))
			}
		}
		return misses
	})
	col.stop(t)
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// profileOf is what the OTel eBPF profiler sends for one process
// (docs/profiles.md), with one sample of thread tid per time; marker names
// the profile (the profile's first attribute, e2e.marker) so that its
// output can be found.
func profileOf(pid, tid int, marker string, times []int64) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	dict.StringTable().Append("", "thread.id", "e2e.marker", "samples", "count")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	a := dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(1)
	a.Value().SetInt(int64(tid))
	m := dict.AttributeTable().AppendEmpty()
	m.SetKeyStrindex(2)
	m.Value().SetStr(marker)
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", int64(pid))
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(3)
	prof.SampleType().SetUnitStrindex(4)
	prof.AttributeIndices().Append(2)
	prof.SetTime(pcommon.Timestamp(times[0]))
	for _, ts := range times {
		s := prof.Samples().AppendEmpty()
		s.AttributeIndices().Append(1)
		s.TimestampsUnixNano().Append(uint64(ts))
	}
	return pd
}

// readProfileLinks finds the profile named marker in the file exporter's
// output and returns its samples' span ids ("" for no link), in order; the
// resource must carry the publisher's service.name.
func readProfileLinks(t *testing.T, path, marker string) ([]string, bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	} else {
		return nil, false
	}
	var um pprofile.JSONUnmarshaler
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		pd, err := um.UnmarshalProfiles(line)
		if err != nil {
			t.Fatalf("%s: not OTLP JSON profiles: %v", path, err)
		}
		dict := pd.Dictionary()
		for _, rp := range pd.ResourceProfiles().All() {
			for _, sp := range rp.ScopeProfiles().All() {
				for _, prof := range sp.Profiles().All() {
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), prof, dict)
					if err != nil {
						t.Fatal(err)
					}
					if v, ok := attrs.Get("e2e.marker"); !ok || v.Str() != marker {
						continue
					}
					if v, ok := rp.Resource().Attributes().Get("service.name"); !ok || v.Str() != "threadpub" {
						t.Errorf("profile %s: resource %v lacks the published service.name=threadpub", marker, rp.Resource().Attributes().AsRaw())
					}
					var links []string
					for _, s := range prof.Samples().All() {
						id := ""
						if i := int(s.LinkIndex()); i > 0 && i < dict.LinkTable().Len() {
							span := dict.LinkTable().At(i).SpanID()
							id = hex.EncodeToString(span[:])
						}
						links = append(links, id)
					}
					return links, true
				}
			}
		}
	}
	return nil, false
}
