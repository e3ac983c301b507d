// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalogview

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

func TestValidateEndpoint(t *testing.T) {
	for _, ok := range []string{"", "unix:/run/otelctx/catalog.sock", "127.0.0.1:13135", "[::1]:13135", "localhost:1", "127.1.2.3:9"} {
		if err := ValidateEndpoint(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:13135", ":13135", "10.0.0.1:13135", "[::]:1", "example.com:1", "unix:relative.sock", "127.0.0.1", "http://127.0.0.1:1"} {
		if err := ValidateEndpoint(bad); err == nil {
			t.Errorf("%q accepted: the catalog must stay on the host", bad)
		}
	}
}

// TestServeFetch: what Fetch reads over the Unix socket and over loopback
// TCP is the catalog's content; the socket is 0600 and gone after Shutdown.
func TestServeFetch(t *testing.T) {
	c := catalog.New()
	p := &publisher.Process{ID: publisher.ProcessID{PID: 42, StartTicks: 7}, ExecutablePath: "/usr/bin/app", MappingAddr: 0x1000}
	p.Context.Resource.Attributes = []processctx.Attribute{{Key: "service.name", Value: processctx.Value{Kind: processctx.KindStr, Str: "checkout"}}}
	p.Context.ThreadLocal.SchemaVersion = "tlsdesc_v1_dev"
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})

	sock := filepath.Join(t.TempDir(), "catalog.sock")
	for _, ep := range []string{"unix:" + sock, "127.0.0.1:0"} {
		srv, err := Serve(ep, c, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		// --from takes catalog_endpoint's own form, and http:// before it.
		froms := []string{ep}
		if ep != "unix:"+sock {
			froms = []string{srv.Addr().String(), "http://" + srv.Addr().String()}
		} else if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %s: %v, mode %v, want 0600", sock, err, fi.Mode().Perm())
		}
		for _, from := range froms {
			v, err := Fetch(from, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Processes) != 1 || v.Processes[0].PID != 42 || v.Processes[0].Resource["service.name"] != "checkout" ||
				v.Processes[0].Executable != "/usr/bin/app" || v.Processes[0].SchemaVersion != "tlsdesc_v1_dev" {
				t.Errorf("%s: %+v", from, v)
			}
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after Shutdown: %v", err)
	}
	if _, err := Fetch("ftp://x", time.Second); err == nil {
		t.Error("Fetch accepted ftp://")
	}
}
