// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package enrich joins the catalog onto telemetry: a resource gets the
// attributes its process publishes (OTEP 4719), found by its process.pid
// and the time of its data, and a profile sample the span and attributes
// its thread had when it was taken (OTEP 4947). Profiles whose resource
// names no process are split by the processes their samples name, and
// samples whose timestamps saw several records by record. The ctxenrich
// processor calls it and records the Counts it returns.
package enrich

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/pdataconv"
	"github.com/otelctx/otelctx/internal/profiledict"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Attribute keys read from the data (semantic conventions).
const (
	keyPID               = profiledict.KeyPID
	keyCreationTime      = "process.creation.time"
	keyExecutablePath    = "process.executable.path"
	keyExecutableName    = "process.executable.name"
	keyServiceInstanceID = "service.instance.id"
)

// Logs joins each resource of ld by its process.pid; the oldest record time
// guards against a reused PID.
func Logs(c *catalog.Catalog, p *Policy, ld plog.Logs) Counts {
	var cnt Counts
	budget := catalog.NewEnvBudget(catalog.DefaultEnvLookups)
	for _, rl := range ld.ResourceLogs().All() {
		var oldest int64
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				oldest = minTime(oldest, int64(lr.Timestamp()))
			}
		}
		p.joinResource(c, rl.Resource().Attributes(), oldest, &budget, &cnt)
	}
	return cnt
}

// Traces joins each resource of td by its process.pid; the oldest span
// start guards against a reused PID.
func Traces(c *catalog.Catalog, p *Policy, td ptrace.Traces) Counts {
	var cnt Counts
	budget := catalog.NewEnvBudget(catalog.DefaultEnvLookups)
	for _, rs := range td.ResourceSpans().All() {
		var oldest int64
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				oldest = minTime(oldest, int64(sp.StartTimestamp()))
			}
		}
		p.joinResource(c, rs.Resource().Attributes(), oldest, &budget, &cnt)
	}
	return cnt
}

// Metrics joins by the resource alone: a cumulative point's start time may
// legitimately precede a restart's, so point times are no proof.
func Metrics(c *catalog.Catalog, p *Policy, md pmetric.Metrics) Counts {
	var cnt Counts
	budget := catalog.NewEnvBudget(catalog.DefaultEnvLookups)
	for _, rm := range md.ResourceMetrics().All() {
		p.joinResource(c, rm.Resource().Attributes(), 0, &budget, &cnt)
	}
	return cnt
}

// intValue reads an int attribute the way detectors write it: an int, or
// a decimal string.
func intValue(v pcommon.Value) (int64, bool) { return profiledict.IntValue(v) }

// join is the outcome of looking up a resource's process.
type join uint8

const (
	joinOK join = iota
	joinNoPID
	joinNoProcess
	joinPIDReuse
	joinLookupBudget // the message's /proc look-ups were spent (catalog.EnvBudget)
)

// lookup finds the process, live or recently exited, that held PID pid
// when the data was taken (from and to: its oldest and newest times, Unix
// ns, 0 when unknown), unless the resource names another one; /proc
// look-ups come out of the message's budget.
func lookup(c *catalog.Catalog, res pcommon.Map, pid, from, to int64, budget *catalog.EnvBudget) (*publisher.Process, join) {
	p, how := c.ProcessWithin(int(pid), from, to, claims(res), budget)
	switch how {
	case catalog.NoProcess:
		return nil, joinNoProcess
	case catalog.OtherHolder:
		return nil, joinPIDReuse
	case catalog.OverBudget:
		return nil, joinLookupBudget
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
func (m *Policy) merge(c *catalog.Catalog, res pcommon.Map, p *publisher.Process, cnt *Counts) {
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
	for _, a := range c.Environment(p) { // string values, valid UTF-8 (otelenv)
		if catalog.Observed(a.Key) || observedIn(workload, a.Key) || !catalog.EnvFills(p, a.Key) {
			continue
		}
		if m.takes(res, a.Key) {
			res.PutStr(a.Key, a.Value.Str)
		}
	}
	for _, kv := range workload {
		if kv[1] != "" && m.takes(res, kv[0]) {
			res.PutStr(kv[0], kv[1])
		}
	}
	cnt.Joined++
	if catalog.NamedByEnvironment(p) {
		cnt.JoinedEnv++
	}
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
func (m *Policy) joinResource(c *catalog.Catalog, res pcommon.Map, oldest int64, budget *catalog.EnvBudget, cnt *Counts) {
	v, ok := res.Get(keyPID)
	if !ok {
		cnt.NoPID++
		return
	}
	pid, ok := intValue(v)
	if !ok {
		cnt.NoPID++
		return
	}
	p, j := lookup(c, res, pid, oldest, oldest, budget)
	switch j {
	case joinNoProcess:
		cnt.NoProcess++
	case joinLookupBudget:
		cnt.LookupBudget++
	case joinPIDReuse:
		cnt.PIDReuse++
	case joinOK:
		m.merge(c, res, p, cnt)
	}
}

// minTime keeps the earliest non-zero time (0 = unknown).
func minTime(cur, t int64) int64 {
	if t > 0 && (cur == 0 || t < cur) {
		return t
	}
	return cur
}
