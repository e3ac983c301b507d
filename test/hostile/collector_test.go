package hostile

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// collector is the built distribution running on a configuration of
// processctx receiver -> file exporter.
type collector struct {
	cmd  *exec.Cmd
	out  string // the exporter's file (OTLP JSON logs, one batch a line)
	log  string
	done chan struct{}
	err  error
}

// startCollector runs the distribution (OTELCTX_DIST_BIN) watching pids
// with thread_sampler (off, or auto for the eBPF prctl events).
func startCollector(t *testing.T, sampler string, pids ...int) *collector {
	t.Helper()
	bin := testenv.DistBinary(t)
	dir := t.TempDir()
	c := &collector{out: filepath.Join(dir, "events.jsonl"), log: filepath.Join(dir, "collector.log"), done: make(chan struct{})}
	cfg := filepath.Join(dir, "config.yaml")
	ids := ""
	for i, p := range pids {
		if i > 0 {
			ids += ", "
		}
		ids += strconv.Itoa(p)
	}
	yaml := fmt.Sprintf(`extensions:
  processctx:
    collection_interval: 100ms
    thread_sampler: %s
    include:
      pids: [%s]
receivers:
  processctx:
    entity_interval: 1m
exporters:
  file:
    path: %s
    format: json
    flush_interval: 100ms
service:
  extensions: [processctx]
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [processctx]
      exporters: [file]
`, sampler, ids, c.out)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c.cmd = exec.Command(bin, "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("collector output:\n%s", b)
		}
	})
	return c
}

// announced reports whether an entity event of pid with service.name
// svc was written.
func (c *collector) announced(t *testing.T, pid int, svc string) bool {
	t.Helper()
	data, err := os.ReadFile(c.out)
	if err != nil {
		return false
	}
	var um plog.JSONUnmarshaler
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		logs, err := um.UnmarshalLogs(line)
		if err != nil {
			continue // empty, or a line being written
		}
		for _, rl := range logs.ResourceLogs().All() {
			res := rl.Resource().Attributes()
			p, okP := res.Get("process.pid")
			s, okS := res.Get("service.name")
			if okP && okS && p.Int() == int64(pid) && s.AsString() == svc {
				return true
			}
		}
	}
	return false
}

// cpuTicks is the collector's user and system time so far, in clock ticks.
func (c *collector) cpuTicks(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	utime, err1 := procstat.Field(b, 14)
	stime, err2 := procstat.Field(b, 15)
	if err1 != nil || err2 != nil {
		t.Fatalf("collector stat: %v, %v", err1, err2)
	}
	return utime + stime
}

// stopWithin sends SIGTERM and fails unless the collector exits, with
// status 0, within d.
func (c *collector) stopWithin(t *testing.T, d time.Duration) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
		if c.err != nil {
			t.Errorf("collector exited after SIGTERM with %v, want status 0", c.err)
		}
	case <-time.After(d):
		t.Errorf("collector still running %v after SIGTERM", d)
	}
}
