// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the sender's compressor
	"google.golang.org/grpc/status"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// profilesExport is the OTLP profiles service's Export method.
const profilesExport = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// rawCodec sends and receives a message's bytes as they are, so that the
// test builds a message of millions of samples without decoding it itself.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// protoField is a length-delimited field num holding body.
func protoField(num int, body []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// emptySampleBomb is an ExportProfilesServiceRequest of one profile holding
// n empty samples: 2 bytes each on the wire (gzip makes the whole a few KB),
// about 90 bytes each once decoded.
func emptySampleBomb(n int) []byte {
	samples := bytes.Repeat([]byte{2<<3 | 2, 0}, n) // Profile.samples = 2
	profile := protoField(2, samples)               // ScopeProfiles.profiles = 2
	scope := protoField(2, profile)                 // ResourceProfiles.scope_profiles = 2
	return protoField(1, scope)                     // request.resource_profiles = 1
}

// memoryCgroup makes a memory cgroup limited to limit bytes (cgroup v2 when
// the unified hierarchy has the memory controller, else the v1 memory
// hierarchy) and returns the cgroup.procs file to write a PID to, and a
// function reading the cgroup's peak usage (v2 memory.peak, v1
// memory.max_usage_in_bytes; 0 when the kernel has none).
func memoryCgroup(t *testing.T, limit int64) (procs string, peak func() int64) {
	t.Helper()
	testenv.RequireRoot(t)
	name := fmt.Sprintf("otelctx-test-%d", os.Getpid())
	var dir, limitFile, peakFile string
	for _, v2 := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		ctl, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
		if err != nil || !strings.Contains(" "+string(ctl)+" ", " memory") {
			continue
		}
		sub, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control"))
		if !strings.Contains(string(sub), "memory") {
			if err := os.WriteFile(filepath.Join(v2, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				continue
			}
		}
		dir, limitFile, peakFile = filepath.Join(v2, name), "memory.max", "memory.peak"
		break
	}
	if dir == "" {
		v1 := "/sys/fs/cgroup/memory"
		if _, err := os.Stat(filepath.Join(v1, "memory.limit_in_bytes")); err != nil {
			testenv.Missing(t, "no memory cgroup controller (cgroup v2 memory, or the v1 memory hierarchy) to run the collector in")
		}
		dir, limitFile, peakFile = filepath.Join(v1, name), "memory.limit_in_bytes", "memory.max_usage_in_bytes"
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Removable once its processes are reaped (the collector's cleanup,
		// registered later, runs first). A helper of the collector's that
		// outlived it is reaped by PID 1, which some hosts do late: left then.
		deadline := time.Now().Add(10 * time.Second)
		for os.Remove(dir) != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Logf("memory cgroup %s left: processes in it not reaped yet", dir)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "cgroup.procs"), func() int64 {
		b, err := os.ReadFile(filepath.Join(dir, peakFile))
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
}

// bombRig is the production configuration run in a 256 MiB memory cgroup
// with the deployments' GOMEMLIMIT and a gateway that takes everything, and
// two client connections to its OTLP receiver.
type bombRig struct {
	t       *testing.T
	col     *proc
	conns   [2]*grpc.ClientConn
	health  int
	metrics int
	peak    func() int64
}

const bombCgroupLimit = 256 << 20

func newBombRig(t *testing.T) *bombRig {
	bin := testenv.DistBinary(t)
	procs, peak := memoryCgroup(t, bombCgroupLimit)
	dir := t.TempDir()
	health, metrics, otlp := freePort(t), freePort(t), freePort(t)
	gateway := gatewaySink(t)
	overlay := fmt.Sprintf(`extensions:
  health_check:
    http:
      endpoint: 127.0.0.1:%d
  processctx:
    catalog_endpoint: unix:%s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  debug/entities:
    verbosity: basic
service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
    logs/entities:
      exporters: [debug/entities]
`, health, filepath.Join(dir, "catalog.sock"), otlp, metrics)
	overlayPath := filepath.Join(dir, "test.yaml")
	if err := os.WriteFile(overlayPath, []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	// The collector enters the cgroup itself before it starts, so that
	// every byte it allocates is charged there.
	cmd := exec.Command("sh", "-c", `echo $$ > "$0" && exec "$@"`, procs, bin,
		"--config", filepath.Join(repoRoot(t), productionConfig), "--config", overlayPath, productionGates)
	// GOMEMLIMIT as the unit and the DaemonSet set it.
	cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT="+gateway, "GOMEMLIMIT=200MiB")
	r := &bombRig{t: t, col: startProc(t, cmd), health: health, metrics: metrics, peak: peak}
	waitFor(t, 60*time.Second, "health_check 200", func() bool { return healthStatus(health) == 200 })

	// Two connections, so that the two streams run at once whatever
	// max_concurrent_streams allows one connection.
	for i := range r.conns {
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", otlp),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.UseCompressor("gzip"),
				grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.conns[i] = conn
	}
	return r
}

func (r *bombRig) export(conn *grpc.ClientConn, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var resp []byte
	return conn.Invoke(ctx, profilesExport, &msg, &resp)
}

// send sends msg on both connections at once, rounds times, and returns
// the status codes of the answers.
func (r *bombRig) send(what string, msg []byte, rounds int) map[codes.Code]int {
	t := r.t
	got := map[codes.Code]int{}
	for round := range rounds {
		errs := make([]error, len(r.conns))
		var wg sync.WaitGroup
		for i, conn := range r.conns {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = r.export(conn, msg) }()
		}
		wg.Wait()
		for _, err := range errs {
			got[status.Code(err)]++
		}
		if r.col.exited() {
			t.Fatalf("%s: the collector exited in round %d (cgroup peak %d MiB of %d MiB; answers %v)",
				what, round, r.peak()>>20, bombCgroupLimit>>20, got)
		}
	}
	t.Logf("%s (%d bytes): answers %v; cgroup peak so far %d MiB of %d MiB", what, len(msg), got, r.peak()>>20, bombCgroupLimit>>20)
	return got
}

// TestOTLPBombBounded: the production configuration is sent a gzip'd
// message of 2,000,000 empty samples (4 MB once decompressed, some 50x that
// once decoded: it got the collector OOM-killed with gRPC's default 4 MiB)
// on 2 streams at once, 3 times: the collector refuses them before
// decoding (ResourceExhausted, max_recv_msg_size_mib), counts the
// refusals, stays up and healthy, and accepts an ordinary message
// afterwards.
func TestOTLPBombBounded(t *testing.T) {
	r := newBombRig(t)
	refused := func() float64 {
		return metricValueWhere(t, r.metrics, "rpc_server_call_duration_count",
			`rpc_response_status_code="RESOURCE_EXHAUSTED"`)
	}
	const rounds = 3
	if got := r.send("2,000,000 empty samples", emptySampleBomb(2_000_000), rounds); got[codes.ResourceExhausted] != 2*rounds {
		t.Errorf("answers %v, want %d ResourceExhausted", got, 2*rounds)
	}
	waitFor(t, 30*time.Second, "the refusals counted", func() bool { return refused() >= 2*rounds })
	if healthStatus(r.health) != 200 {
		t.Errorf("health_check %d after the messages", healthStatus(r.health))
	}
	if err := r.export(r.conns[0], emptySampleBomb(1000)); err != nil {
		t.Errorf("an ordinary message: %v", err)
	}
	t.Logf("refused %v; cgroup peak %d MiB of %d MiB", refused(), r.peak()>>20, bombCgroupLimit>>20)
}

// TestOTLPDecodeBudget: under max_recv_msg_size_mib, a message of 524,280
// empty samples (just under 1 MiB, some 75 MiB once decoded: two at once on
// two connections got the collector OOM-killed before the decode_budget
// extension) sent on 2 connections at once, 5 times, is refused before
// decoding (ResourceExhausted, counted by reason); then messages just
// under max_elements (65,000 samples of two values each, 390 KB) 2
// at once, 3 times, are accepted (or refused by memory_limiter). The collector stays up and healthy throughout and an
// ordinary message goes through.
func TestOTLPDecodeBudget(t *testing.T) {
	r := newBombRig(t)
	refused := func() float64 {
		return metricValueWhere(t, r.metrics, "otelcol_decode_budget_refused", `reason="elements"`)
	}
	bomb := emptySampleBomb(524_280)
	if len(bomb) >= 1<<20 {
		t.Fatalf("the message is %d bytes, want under 1 MiB (max_recv_msg_size_mib)", len(bomb))
	}
	const rounds = 5
	if got := r.send("524,280 empty samples", bomb, rounds); got[codes.ResourceExhausted] != 2*rounds {
		t.Errorf("answers %v, want %d ResourceExhausted", got, 2*rounds)
	}
	waitFor(t, 30*time.Second, "the refusals counted", func() bool { return refused() >= 2*rounds })

	// Accepted, or refused by memory_limiter: either way the collector
	// must stay up.
	r.send("65,000 samples of two values", valuesSamples(65_000), 3)
	if healthStatus(r.health) != 200 {
		t.Errorf("health_check %d after the messages", healthStatus(r.health))
	}
	waitFor(t, 2*time.Minute, "an ordinary message accepted", func() bool {
		return r.export(r.conns[0], emptySampleBomb(1000)) == nil
	})
	t.Logf("refused %v (reason elements), decodes that waited for the budget %v; cgroup peak %d MiB of %d MiB",
		refused(), metricValueWhere(t, r.metrics, "otelcol_decode_budget_waits", ""), r.peak()>>20, bombCgroupLimit>>20)
}

// valuesSamples is an ExportProfilesServiceRequest of one profile holding
// n samples of two values each (6 bytes on the wire).
func valuesSamples(n int) []byte {
	sample := protoField(2, []byte{4 << 3, 1, 4 << 3, 1}) // Sample.values = 4, unpacked
	return protoField(1, protoField(2, protoField(2, bytes.Repeat(sample, n))))
}

// metricValueWhere sums the samples of a Prometheus metric whose labels
// contain label (e.g. `code="8"`); 0 when none or the endpoint does not
// answer yet.
func metricValueWhere(t *testing.T, port int, name, label string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name+"{") || !strings.Contains(l, label) {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// gatewaySink is a gRPC server that answers every call with an empty
// message (the gateway the collector exports to); its address.
func gatewaySink(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.MaxRecvMsgSize(64<<20),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var in []byte
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			out := []byte{}
			return stream.SendMsg(&out)
		}))
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String()
}
