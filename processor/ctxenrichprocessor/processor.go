// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/pdataconv"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/watcher"
)

// Attribute keys read from the data (semantic conventions).
const (
	keyPID               = "process.pid"
	keyThreadID          = "thread.id"
	keyCreationTime      = "process.creation.time"
	keyExecutablePath    = "process.executable.path"
	keyExecutableName    = "process.executable.name"
	keyServiceInstanceID = "service.instance.id"
)

// enricher is one ctxenrich processor instance (one per signal).
type enricher struct {
	cfg *Config
	tel *telemetry
	// cat is set by Start, from the extension (the collector starts
	// extensions before pipelines).
	cat atomic.Pointer[catalog.Catalog]
}

func newEnricher(set processor.Settings, cfg *Config) (*enricher, error) {
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &enricher{cfg: cfg, tel: tel}, nil
}

func (e *enricher) start(_ context.Context, host component.Host) error {
	w, err := watcher.FromHost(host, e.cfg.Extension)
	if err != nil {
		return fmt.Errorf("ctxenrich: %w", err)
	}
	e.cat.Store(w.Catalog())
	return nil
}

func (e *enricher) shutdown(context.Context) error {
	e.tel.Shutdown()
	return nil
}

// intValue reads an int attribute the way detectors write it: an int, or
// a decimal string.
func intValue(v pcommon.Value) (int64, bool) {
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int(), true
	case pcommon.ValueTypeStr:
		n, err := strconv.ParseInt(v.Str(), 10, 64)
		return n, err == nil
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if d == float64(int64(d)) {
			return int64(d), true
		}
	}
	return 0, false
}

// join is the outcome of looking up a resource's process.
type join uint8

const (
	joinOK join = iota
	joinNoPID
	joinNoProcess
	joinPIDReuse
)

// lookup finds the process, live or recently exited, that held PID pid
// when the data was taken (from and to: its oldest and newest times, Unix
// ns, 0 when unknown), unless the resource names another one.
func (e *enricher) lookup(c *catalog.Catalog, res pcommon.Map, pid, from, to int64) (*publisher.Process, join) {
	p, how := c.ProcessFor(int(pid), from, to, claims(res))
	switch how {
	case catalog.NoProcess:
		return nil, joinNoProcess
	case catalog.OtherHolder:
		return nil, joinPIDReuse
	}
	return p, joinOK
}

// claims reads what a resource says of its process.
func claims(res pcommon.Map) catalog.Claims {
	var cl catalog.Claims
	if v, ok := res.Get(keyCreationTime); ok && v.Type() == pcommon.ValueTypeStr {
		if t, err := time.Parse(time.RFC3339Nano, v.Str()); err == nil {
			cl.CreationTime = t
		}
	}
	str := func(k string) string {
		if v, ok := res.Get(k); ok {
			return v.Str()
		}
		return ""
	}
	cl.ExecutablePath, cl.ExecutableName, cl.ServiceInstanceID = str(keyExecutablePath), str(keyExecutableName), str(keyServiceInstanceID)
	return cl
}

// merge adds p's resource attributes to res by the policy: those it
// publishes, then those its environment names that the published ones lack
// (catalog.EnvFills). The observed ones (process.pid,
// process.executable.*, …) are never taken from the process, and the
// workload the extension read from the process's cgroup path
// (container.id, k8s.pod.uid), where known, takes the place of the
// process's value under the same policy.
func (e *enricher) merge(c *catalog.Catalog, res pcommon.Map, p *publisher.Process, cnt *counts) {
	m := &e.cfg.ResourceMerge
	workload := catalog.Workload(p)
	attrs := p.Context.Resource.Attributes
	for i := range attrs {
		a := &attrs[i]
		key := pdataconv.Str(a.Key) // the key as pdata will hold it (values: PutValue)
		if catalog.Observed(key) || observedIn(workload, key) {
			continue
		}
		if m.takes(res, key) {
			pdataconv.PutValue(res.PutEmpty(key), a.Value)
		}
	}
	for _, a := range c.Environment(p) { // valid UTF-8 (otelenv)
		if catalog.Observed(a.Key) || observedIn(workload, a.Key) || !catalog.EnvFills(p, a.Key) {
			continue
		}
		if m.takes(res, a.Key) {
			res.PutStr(a.Key, a.Value)
		}
	}
	for _, kv := range workload {
		if kv[1] != "" && m.takes(res, kv[0]) {
			res.PutStr(kv[0], kv[1])
		}
	}
	cnt.joined++
	if catalog.NamedByEnvironment(p) {
		cnt.joinedEnv++
	}
}

// takes reports whether the process's value of key goes onto res: it
// replaces res's under published_wins, else fills a key res lacks under
// other_keys: insert.
func (m *ResourceMergeConfig) takes(res pcommon.Map, key string) bool {
	if m.publishedWins(key) {
		return true
	}
	if m.OtherKeys != OtherKeysInsert {
		return false
	}
	_, has := res.Get(key)
	return !has
}

// observedIn reports whether the workload holds a known value for key.
func observedIn(workload [2][2]string, key string) bool {
	for _, kv := range workload {
		if kv[0] == key && kv[1] != "" {
			return true
		}
	}
	return false
}

// joinResource joins one resource of logs, metrics or traces by its
// process.pid.
func (e *enricher) joinResource(c *catalog.Catalog, res pcommon.Map, oldest int64, cnt *counts) {
	v, ok := res.Get(keyPID)
	if !ok {
		cnt.noPID++
		return
	}
	pid, ok := intValue(v)
	if !ok {
		cnt.noPID++
		return
	}
	p, j := e.lookup(c, res, pid, oldest, oldest)
	switch j {
	case joinNoProcess:
		cnt.noProcess++
	case joinPIDReuse:
		cnt.pidReuse++
	case joinOK:
		e.merge(c, res, p, cnt)
	}
}

func (e *enricher) processLogs(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
	c := e.cat.Load()
	if c == nil {
		return ld, nil
	}
	var cnt counts
	for _, rl := range ld.ResourceLogs().All() {
		// The oldest record time guards against a reused PID.
		var oldest int64
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				oldest = minTime(oldest, int64(lr.Timestamp()))
			}
		}
		e.joinResource(c, rl.Resource().Attributes(), oldest, &cnt)
	}
	e.tel.record(ctx, "logs", &cnt)
	return ld, nil
}

func (e *enricher) processTraces(ctx context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	c := e.cat.Load()
	if c == nil {
		return td, nil
	}
	var cnt counts
	for _, rs := range td.ResourceSpans().All() {
		var oldest int64
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				oldest = minTime(oldest, int64(sp.StartTimestamp()))
			}
		}
		e.joinResource(c, rs.Resource().Attributes(), oldest, &cnt)
	}
	e.tel.record(ctx, "traces", &cnt)
	return td, nil
}

// processMetrics joins by the resource alone: a cumulative point's start
// time may legitimately precede a restart's, so point times are no proof.
func (e *enricher) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	c := e.cat.Load()
	if c == nil {
		return md, nil
	}
	var cnt counts
	for _, rm := range md.ResourceMetrics().All() {
		e.joinResource(c, rm.Resource().Attributes(), 0, &cnt)
	}
	e.tel.record(ctx, "metrics", &cnt)
	return md, nil
}

// minTime keeps the earliest non-zero time (0 = unknown).
func minTime(cur, t int64) int64 {
	if t > 0 && (cur == 0 || t < cur) {
		return t
	}
	return cur
}
