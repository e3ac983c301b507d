// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package catalogview is the running collector's catalog as an operator
// reads it: the processctx extension serves it on its catalog_endpoint
// (off by default; a Unix socket or a loopback address), and
// `otelctx list --from` fetches and prints it, so what is shown is what the
// agent holds, not a second reading of /proc.
package catalogview

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Path is where the view is served.
const Path = "/v1/processes"

// maxBody bounds what Fetch reads: a catalog of 16,384 processes with
// their largest contexts fits many times over.
const maxBody = 256 << 20

// View is the catalog at one moment.
type View struct {
	// Processes are the tracked publishers, sorted by PID.
	Processes []Process `json:"processes"`
	// Retained counts exited processes kept joinable for late profiles.
	Retained int `json:"retained"`
	// Threads counts threads with a history, Runs their entries.
	Threads int `json:"threads"`
	Runs    int `json:"runs"`
}

// Process is one tracked publisher. Resource and Attributes are the
// objects `otelctx dump --json` prints.
type Process struct {
	PID           int            `json:"pid"`
	Executable    string         `json:"executable"`
	Resource      map[string]any `json:"resource"`
	Attributes    map[string]any `json:"attributes"`
	SchemaVersion string         `json:"schema_version"`
	// Threads with a history in the catalog (read at samples or ticks).
	Threads int `json:"threads"`
}

// Snapshot reads the catalog.
func Snapshot(c *catalog.Catalog) View {
	procs := c.Processes()
	slices.SortFunc(procs, func(a, b *publisher.Process) int { return a.ID.PID - b.ID.PID })
	v := View{Processes: make([]Process, 0, len(procs)), Retained: c.RetainedCount(), Threads: c.ThreadCount(), Runs: c.EntryCount()}
	for _, p := range procs {
		exe := p.ExecutablePath
		if exe == "" {
			exe = p.ExecutableName
		}
		v.Processes = append(v.Processes, Process{
			PID:           p.ID.PID,
			Executable:    exe,
			Resource:      Attributes(p.Context.Resource.Attributes),
			Attributes:    Attributes(p.Context.Attributes),
			SchemaVersion: p.Context.ThreadLocal.SchemaVersion,
			Threads:       len(c.Threads(p.ID.PID)),
		})
	}
	return v
}

// Attributes converts an attribute list to a JSON object (a later
// duplicate key wins). Never nil, so an empty list is {} and not null.
func Attributes(attrs []processctx.Attribute) map[string]any {
	out := make(map[string]any, len(attrs))
	for _, a := range attrs {
		out[a.Key] = Value(a.Value)
	}
	return out
}

// Value converts an AnyValue to what encoding/json renders naturally:
// strings, int64 as integers, doubles, bools, bytes as base64 strings,
// arrays as arrays, kvlists as objects and an empty AnyValue as null. It is
// processctx.Value.AsRaw except where AsRaw does not survive json.Marshal:
// non-finite doubles (rendered as protobuf's JSON mapping does: "NaN",
// "Infinity", "-Infinity") and empty bytes (which AsRaw leaves as a nil
// []byte, i.e. null).
func Value(v processctx.Value) any {
	switch v.Kind {
	case processctx.KindDouble:
		switch {
		case math.IsNaN(v.Double):
			return "NaN"
		case math.IsInf(v.Double, 1):
			return "Infinity"
		case math.IsInf(v.Double, -1):
			return "-Infinity"
		}
		return v.Double
	case processctx.KindBytes:
		return base64.StdEncoding.EncodeToString(v.Bytes)
	case processctx.KindArray:
		out := make([]any, len(v.Array))
		for i := range v.Array {
			out[i] = Value(v.Array[i])
		}
		return out
	case processctx.KindKVList:
		return Attributes(v.KVList)
	default:
		return v.AsRaw()
	}
}

// ValidateEndpoint accepts "" (off), "unix:/absolute/path", or a loopback
// address with a port (127.0.0.1:N, [::1]:N, localhost:N): the catalog
// names every publisher's service and is readable by whoever reaches it.
func ValidateEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("catalog_endpoint %q: a Unix socket needs an absolute path (unix:/run/otelctx/catalog.sock)", endpoint)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return fmt.Errorf("catalog_endpoint %q: want unix:/PATH or a loopback HOST:PORT: %w", endpoint, err)
	}
	if host == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
		return fmt.Errorf("catalog_endpoint %q: only a loopback address (127.0.0.1, ::1, localhost) or a Unix socket: the catalog names every publisher on the host", endpoint)
	}
	return nil
}

// Server serves a catalog's view.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	path string // the Unix socket, removed at Shutdown
}

// Serve listens on endpoint (validated by ValidateEndpoint) and serves the
// view of c on Path. A Unix socket is created 0600 (root, or the unit's
// user, reads it), replacing a stale one.
func Serve(endpoint string, c *catalog.Catalog, log *zap.Logger) (*Server, error) {
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, err
	}
	s := &Server{done: make(chan struct{})}
	var err error
	if path, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		if fi, serr := os.Lstat(path); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path) // a previous run's
		}
		s.path = path
		// Its directory too (the unit's RuntimeDirectory, the pod's emptyDir
		// exist already; elsewhere root's /run/otelctx).
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			s.ln, err = net.Listen("unix", path)
		}
		if err == nil {
			err = os.Chmod(path, 0o600)
		}
	} else {
		s.ln, err = net.Listen("tcp", endpoint)
	}
	if err != nil {
		if s.ln != nil {
			s.ln.Close()
		}
		return nil, fmt.Errorf("catalog_endpoint %s: %w", endpoint, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(Snapshot(c)); err != nil {
			log.Debug("catalog_endpoint: writing the view", zap.Error(err))
		}
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("catalog_endpoint stopped", zap.Error(err))
		}
	}()
	log.Info("catalog_endpoint: serving the catalog", zap.String("endpoint", endpoint))
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the server and removes its Unix socket.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	if s.path != "" {
		_ = os.Remove(s.path)
	}
	return err
}

// Fetch reads the view a collector serves at from: "unix:/PATH",
// "http://HOST:PORT" or "HOST:PORT" (Path is appended), within timeout.
// HOST:PORT is what catalog_endpoint takes, so its value works as it is.
func Fetch(from string, timeout time.Duration) (View, error) {
	var v View
	if !strings.Contains(from, "://") && !strings.HasPrefix(from, "unix:") {
		from = "http://" + from
	}
	url := strings.TrimSuffix(from, "/") + Path
	tr := &http.Transport{}
	if path, ok := strings.CutPrefix(from, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		url = "http://catalog" + Path
	} else if !strings.HasPrefix(from, "http://") {
		return v, fmt.Errorf("--from %q: want unix:/PATH, HOST:PORT or http://HOST:PORT (the extension's catalog_endpoint)", from)
	}
	cl := &http.Client{Timeout: timeout, Transport: tr}
	defer tr.CloseIdleConnections()
	resp, err := cl.Get(url)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s: %s", from, resp.Status)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxBody))
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("%s: %w", from, err)
	}
	return v, nil
}
