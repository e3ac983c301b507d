// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"strings"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

// creationTolerance: both sides come from the same kernel start time, but
// writers round differently.
const creationTolerance = 50 * time.Millisecond

// commLen: a detector that reports comm as the executable name gives at
// most this many bytes of it.
const commLen = 15

// Claims are what data says of the process it came from (its resource
// attributes); empty fields claim nothing.
type Claims struct {
	CreationTime      time.Time
	ExecutablePath    string
	ExecutableName    string
	ServiceInstanceID string
}

// Contradict reports whether the claims name a process other than p: PIDs
// are reused, and data of another holder must not get p's context.
func (cl Claims) Contradict(p *publisher.Process) bool {
	if !cl.CreationTime.IsZero() && !p.CreationTime.IsZero() {
		if d := cl.CreationTime.Sub(p.CreationTime); d > creationTolerance || d < -creationTolerance {
			return true
		}
	}
	if cl.ExecutablePath != "" && p.ExecutablePath != "" {
		// /proc/PID/exe reads "… (deleted)" once the binary is replaced.
		if strings.TrimSuffix(cl.ExecutablePath, " (deleted)") != strings.TrimSuffix(p.ExecutablePath, " (deleted)") {
			return true
		}
	} else if n := cl.ExecutableName; n != "" && p.ExecutableName != "" {
		if n != p.ExecutableName && (len(n) != commLen || !strings.HasPrefix(p.ExecutableName, n)) {
			return true
		}
	}
	if cl.ServiceInstanceID != "" && !p.FromEnvironment { // a published one: the environment's is not checked
		for i := range p.Context.Resource.Attributes {
			a := &p.Context.Resource.Attributes[i]
			if a.Key == "service.instance.id" && a.Value.Str != "" && a.Value.Str != cl.ServiceInstanceID {
				return true
			}
		}
	}
	return false
}

// ProcessFor returns the process that data about pid came from, given the
// data's oldest and newest times (Unix ns; 0: now) and its claims: the one
// holder of pid over that span, not contradicted by the claims.
func (c *Catalog) ProcessFor(pid int, from, to int64, cl Claims) (*publisher.Process, Lookup) {
	return c.ProcessWithin(pid, from, to, cl, nil)
}

// ProcessWithin is ProcessFor with the /proc look-ups of the environment
// source taken from budget (nil: unbounded): past it, OverBudget.
func (c *Catalog) ProcessWithin(pid int, from, to int64, cl Claims, budget *EnvBudget) (*publisher.Process, Lookup) {
	p, how := c.ProcessAt(pid, from)
	if how == NoProcess {
		// Not a publisher: the process may name itself in its environment.
		if p, how = c.envProcessFor(pid, from, to, budget); how != Found {
			return nil, how
		}
		if cl.Contradict(p) {
			return nil, OtherHolder
		}
		return p, Found
	}
	if how != Found {
		// No publisher held it then: the holder may name itself in its
		// environment (before a publisher was created, after one exited).
		if q, how := c.envProcessFor(pid, from, to, budget); how == Found && !cl.Contradict(q) {
			return q, Found
		}
		return nil, OtherHolder
	}
	if cl.Contradict(p) {
		return nil, OtherHolder
	}
	if to != from {
		if q, _ := c.ProcessAt(pid, to); q != p {
			return nil, OtherHolder
		}
	}
	if live, ok := c.Process(pid); ok && live == p && !c.holderAt(p, max(from, to), budget) {
		// Taken after it exited: the PID's next holder's, which may name
		// itself in its environment.
		if q, how := c.envProcessFor(pid, from, to, budget); how == Found && !cl.Contradict(q) {
			return q, Found
		}
		return nil, OtherHolder
	}
	return p, Found
}
