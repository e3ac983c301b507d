// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/promrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestStalledAlertOnRealScrape: the production configuration, watching
// publisher A only, with read_timeout (1 h) above stall_timeout (1 s) so
// that A's userfaultfd page wedges the poll round for real, scraped by a
// real Prometheus with the shipped alerting rules (promrun: minutes made
// seconds). OtelctxStalled does not fire while the round moves, fires for
// stage poll_round once it is wedged, and clears when A releases the page.
func TestStalledAlertOnRealScrape(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	a, addr := uffdHostile(t)
	dir := t.TempDir()
	metrics := freeAddr(t)
	host, portText, _ := net.SplitHostPort(metrics)
	port, _ := strconv.Atoi(portText)
	overlay := map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"http": map[string]any{"endpoint": freeAddr(t)}},
			"process_ctx": map[string]any{
				"catalog_endpoint": "unix:" + filepath.Join(dir, "catalog.sock"),
				"include":          map[string]any{"pids": []int{a.PID}},
				"read_timeout":     "1h", "stall_timeout": "1s", "collection_interval": "100ms",
			},
		},
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": "127.0.0.1:0"}}}},
		// The production configuration's level (detailed, with its views).
		"service": map[string]any{"telemetry": map[string]any{"metrics": map[string]any{
			"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
				"prometheus": map[string]any{"host": host, "port": port}}}}},
		}}},
	}
	b, err := yaml.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "test.yaml")
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The gateway is not reached: nothing here is exported in time to matter.
	t.Setenv("OTELCTX_GATEWAY_ENDPOINT", "127.0.0.1:1")
	root := testenv.RepoRoot()
	c := distrun.Start(t, bin, filepath.Join(dir, "collector.log"),
		"--config", filepath.Join(root, "config", "otelctx-production.yaml"), "--config", ov, distrun.ProductionGates)
	p := promrun.Start(t, filepath.Join(root, "deploy", "prometheus", "otelctx-alerts.yaml"), metrics)
	stalled := func() bool { return p.Firing(t, "OtelctxStalled", metrics) }
	testenv.EventuallyEvery(t, time.Minute, 500*time.Millisecond, "the stall gauge scraped at 0", func() bool {
		if c.Exited() {
			t.Fatalf("the collector exited:\n%s", c.Log())
		}
		return len(p.Query(t, fmt.Sprintf(`otelcol_processctx_stalled{instance=%q, stage="poll_round"} == 0`, metrics))) == 1
	})
	if stalled() {
		t.Fatal("OtelctxStalled fires before anything is wedged")
	}

	a.Do("move %#x", addr)
	testenv.EventuallyEvery(t, 3*time.Minute, 500*time.Millisecond, "OtelctxStalled firing while the poll round is wedged", stalled)
	for _, al := range p.Alerts(t) {
		if al.Name == "OtelctxStalled" && al.Labels["stage"] != "poll_round" {
			t.Errorf("OtelctxStalled for stage %q, the wedged one is poll_round", al.Labels["stage"])
		}
	}

	a.Do("uffdclose")
	testenv.EventuallyEvery(t, 3*time.Minute, 500*time.Millisecond, "OtelctxStalled cleared once the read returned", func() bool { return !stalled() })
}
