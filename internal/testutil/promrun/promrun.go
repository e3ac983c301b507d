// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package promrun runs a real Prometheus server (Debian's prometheus
// package) on loopback for a test: it scrapes the given targets every
// second and evaluates the shipped alerting rules with their durations
// scaled from minutes to seconds (ranges at least MinRange), so that what
// takes 15 minutes on a node takes 15 seconds in a test while the
// expressions, the metric names and the labels stay as shipped.
package promrun

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Job is the scrape job's name: the rules' `up` alert selects jobs whose
// name contains otelctx.
const Job = "otelctx"

// Server is one running Prometheus.
type Server struct {
	Addr string // host:port of its HTTP API
	// Window is the longest an alert of the scaled rules needs to fire:
	// a healthy target fires none over it.
	Window time.Duration
	cmd    *exec.Cmd
	log    string
	done   chan struct{}
}

var (
	forMinutes   = regexp.MustCompile(`(?m)^(\s+for: )(\d+)m\s*$`)
	rangeMinutes = regexp.MustCompile(`\[(\d+)m\]`)
)

// MinRange is the shortest range a scaled rule gets: a rate over fewer
// seconds can miss a counter that the exporter's batches (every 5 s) move,
// and see it flat.
const MinRange = 20

// ScaleRules is the rule file's text with every `for: Nm` made N seconds
// and every range `[Nm]` N seconds (at least MinRange), and the longest an
// alert then needs to fire (its `for` plus the longest range). It fails the
// test when the file has neither (the scaling would test nothing new).
func ScaleRules(tb testing.TB, text string) (string, time.Duration) {
	tb.Helper()
	if !forMinutes.MatchString(text) || !rangeMinutes.MatchString(text) {
		tb.Fatal("the rule file has no `for: Nm` or `[Nm]`: promrun scales minutes to seconds")
	}
	var maxFor, maxRange int
	text = forMinutes.ReplaceAllStringFunc(text, func(m string) string {
		g := forMinutes.FindStringSubmatch(m)
		n, _ := strconv.Atoi(g[2])
		maxFor = max(maxFor, n)
		return fmt.Sprintf("%s%ds", g[1], n)
	})
	text = rangeMinutes.ReplaceAllStringFunc(text, func(m string) string {
		n, _ := strconv.Atoi(rangeMinutes.FindStringSubmatch(m)[1])
		n = max(n, MinRange)
		maxRange = max(maxRange, n)
		return fmt.Sprintf("[%ds]", n)
	})
	return text, time.Duration(maxFor+maxRange) * time.Second
}

// Start runs prometheus with the rule file (scaled) scraping targets
// (host:port, /metrics) every second as job Job; it is stopped when the
// test ends. Without the prometheus binary the test skips (fails under
// CI=true).
func Start(tb testing.TB, rulesPath string, targets ...string) *Server {
	tb.Helper()
	bin := testenv.RequireTool(tb, "prometheus")
	promtool := testenv.RequireTool(tb, "promtool")
	dir := tb.TempDir()
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		tb.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	scaled, window := ScaleRules(tb, string(b))
	if err := os.WriteFile(rules, []byte(scaled), 0o644); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		tb.Fatalf("promtool check rules on the scaled rules: %v\n%s", err, out)
	}
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = fmt.Sprintf("%q", t)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%s]
`, rules, Job, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	addr := freeAddr(tb)
	s := &Server{Addr: addr, Window: window, log: filepath.Join(dir, "prometheus.log"), done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		tb.Fatal(err)
	}
	// Only loopback, a data directory of the test's own, no service: the
	// Debian package's unit is not started.
	s.cmd = exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--web.console.templates="+dir, "--web.console.libraries="+dir)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		tb.Fatalf("prometheus: %v", err)
	}
	go func() { _ = s.cmd.Wait(); logf.Close(); close(s.done) }()
	tb.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(testenv.Scaled(30 * time.Second)):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		if tb.Failed() {
			tb.Logf("prometheus log:\n%s", s.Log())
		}
	})
	testenv.EventuallyEvery(tb, time.Minute, 200*time.Millisecond, "prometheus ready on "+addr, func() bool {
		select {
		case <-s.done:
			tb.Fatalf("prometheus exited:\n%s", s.Log())
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// Log is the server's output so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// Sample is one series of an instant vector.
type Sample struct {
	Metric map[string]string
	Value  float64
}

// Query evaluates an instant query now.
func (s *Server) Query(tb testing.TB, q string) []Sample {
	tb.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	s.get(tb, "/api/v1/query?query="+url.QueryEscape(q), &r)
	if r.Status != "success" {
		tb.Fatalf("query %s: %s", q, r.Error)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		var v float64
		if str, ok := e.Value[1].(string); ok {
			_, _ = fmt.Sscan(str, &v) // a value that is not a number reads 0
		}
		out = append(out, Sample{Metric: e.Metric, Value: v})
	}
	return out
}

// Alert is one alert as the server holds it now.
type Alert struct {
	Name     string
	State    string // pending or firing
	Instance string
	Labels   map[string]string
}

// Alerts are the server's pending and firing alerts now.
func (s *Server) Alerts(tb testing.TB) []Alert {
	tb.Helper()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	s.get(tb, "/api/v1/alerts", &r)
	var out []Alert
	for _, a := range r.Data.Alerts {
		out = append(out, Alert{Name: a.Labels["alertname"], State: a.State, Instance: a.Labels["instance"], Labels: a.Labels})
	}
	return out
}

// Firing reports whether alert name fires for instance ("" for any).
func (s *Server) Firing(tb testing.TB, name, instance string) bool {
	tb.Helper()
	for _, a := range s.Alerts(tb) {
		if a.Name == name && a.State == "firing" && (instance == "" || a.Instance == instance) {
			return true
		}
	}
	return false
}

// RuleHealth fails the test on a rule the server could not evaluate.
func (s *Server) RuleHealth(tb testing.TB) (rules int) {
	tb.Helper()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	s.get(tb, "/api/v1/rules", &r)
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			rules++
			if rule.Health == "err" {
				tb.Errorf("rule %s: %s", rule.Name, rule.LastError)
			}
		}
	}
	return rules
}

// LastEvaluation is when the server last evaluated every rule group (the
// earliest of the groups' last evaluations).
func (s *Server) LastEvaluation(tb testing.TB) time.Time {
	tb.Helper()
	var r struct {
		Data struct {
			Groups []struct {
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"groups"`
		} `json:"data"`
	}
	s.get(tb, "/api/v1/rules", &r)
	var last time.Time
	for i, g := range r.Data.Groups {
		if i == 0 || g.LastEvaluation.Before(last) {
			last = g.LastEvaluation
		}
	}
	return last
}

func (s *Server) get(tb testing.TB, path string, v any) {
	tb.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.Addr + path)
	if err != nil {
		tb.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		tb.Fatalf("prometheus %s: %v", path, err)
	}
}

func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
