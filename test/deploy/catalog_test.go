// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestCatalogFromRunningCollector: the production configuration serves the
// catalog on a Unix socket only its user can open, and `otelctx list --from`
// prints what the running collector holds (the demo publisher, its service
// and its threads read at ticks), as docs/operating.md shows on a node.
func TestCatalogFromRunningCollector(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	dir := t.TempDir()
	cli := filepath.Join(dir, "otelctx")
	build := testenv.GoBuild(root, "-o", cli, "./cmd/otelctx")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/otelctx: %v\n%s", err, out)
	}
	pid := startDemo(t, nil)
	cmd := exec.Command(bin, "--config", filepath.Join(root, productionConfig),
		"--config", productionOverlay(t, dir, freePort(t)),
		productionGates,
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid))
	cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1")
	col := startProc(t, cmd)
	col.waitOutput(t, "the demo's entity event", entityLine, 30*time.Second)
	sock := filepath.Join(dir, "catalog.sock")
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("catalog socket %s: %v (want mode 0600)", sock, err)
	}
	// The demo's row: its PID, service and at least one thread with a
	// history (its busy threads are read at own ticks).
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+threadpub\s+otelctx-demo\s+\S+\s+\S+\s+[1-9][0-9]*$`, pid))
	var out []byte
	waitFor(t, 60*time.Second, "the demo with its threads in `otelctx list --from`", func() bool {
		var err error
		out, err = exec.Command(cli, "list", "--from", "unix:"+sock).CombinedOutput()
		if err != nil {
			t.Fatalf("otelctx list --from: %v\n%s", err, out)
		}
		return row.Match(out)
	})
	t.Logf("otelctx list --from unix:%s:\n%s", sock, out)
}
