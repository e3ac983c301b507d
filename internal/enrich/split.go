// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"cmp"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// splitOutcome says what splitByPID did with an original ResourceProfiles.
type splitOutcome uint8

const (
	splitNone    splitOutcome = iota // one process or none named: joined as a whole
	splitDone                        // split or refused: every sample is accounted for, none is left to join
	splitEmptied                     // every sample moved to a copy (and no payload stays): the original goes
)

// pidGroup is the samples of one ResourceProfiles that name one process
// through one attribute table entry (two entries with the same PID are two
// groups, which share a copy if they move). Its PID is in pidSplit.pids.
type pidGroup struct {
	n              int64
	oldest, newest int64
	dst            int32 // index in pidSplit.dsts, -1: stays
}

// pidCopy is the copy of a ResourceProfiles that the samples of one process
// move to, and the scope and profile it got last (the original's scope
// and profile index).
type pidCopy struct {
	rp          pprofile.ResourceProfiles
	scope, prof int
	dstScope    pprofile.ScopeProfiles
	dstProf     pprofile.Profile
	// cost: the bytes of the copy apart from its samples.
	cost int
}

// pidSplit is splitByPID's scratch. byAttr is indexed by attribute table
// entry and tagged with a generation (one per ResourceProfiles), so it is
// never cleared within a message, however many ResourceProfiles it has.
type pidSplit struct {
	gen    uint32
	groups []pidGroup
	byAttr []genGroup
	// sample: per sample of the ResourceProfiles (in order), its group, or
	// -1 (names no process, or is invalid).
	sample   []int32
	moving   []int32 // the groups that move, by PID
	pids     []int64 // per group: its PID
	known    []bool  // per group: the catalog knows its PID
	dsts     []pidCopy
	outcomes []splitOutcome
	// msg is the message; budget (-1: not known yet) the bytes its
	// copies may still take apart from their samples: its size at first
	// (at least minSplitBudget).
	msg    pprofile.Profiles
	budget int
}

// genGroup is a group index valid in generation gen.
type genGroup struct {
	gen uint32
	g   int32
}

func (s *pidSplit) init(msg pprofile.Profiles, nAttrs int) {
	s.msg, s.budget = msg, -1
	s.byAttr = slices.Grow(s.byAttr[:0], nAttrs)[:nAttrs]
	clear(s.byAttr)
	s.gen = 0
	s.outcomes = s.outcomes[:0]
}

// emptied returns s for the next message: its buffers emptied, the rest
// zero.
func (s *pidSplit) emptied() pidSplit {
	return pidSplit{
		groups: s.groups[:0], byAttr: s.byAttr[:0], sample: s.sample[:0], moving: s.moving[:0],
		pids: s.pids[:0], known: s.known[:0], dsts: emptied(s.dsts), outcomes: s.outcomes[:0],
	}
}

// splitByPID makes rp a one-process ResourceProfiles when its resource has
// no process.pid and its samples' process.pid attributes name processes:
// one process (every sample naming it): the resource gets its process.pid;
// several: the samples of each process the catalog held at their times
// move to a copy of rp (resource, scopes, profiles without their samples
// and original payload, which only rp keeps) for that process, as long as
// the copies' bytes apart from samples fit in the message's size (or
// minSplitBudget): the
// samples of the processes past it stay in rp (split_budget). Samples of PIDs the catalog cannot join, samples
// naming none and invalid ones stay in rp, counted: a copy would add
// nothing but cost. Every step is linear in the samples and the
// dictionary, whatever number of PIDs they name. Samples keep their
// dictionary indices: the dictionary is shared by the whole message.
func (b *batch) splitByPID(rps pprofile.ResourceProfilesSlice, rp pprofile.ResourceProfiles) (o splitOutcome, cls rpClass, classified bool) {
	res := rp.Resource().Attributes()
	if _, ok := res.Get(keyPID); ok {
		return splitNone, cls, false
	}
	cls = b.classify(rp)
	without := b.groupByPID(rp, b.why[cls.off:])
	sp := &b.split
	switch {
	case len(sp.groups) == 0:
		return splitNone, cls, true
	case without == 0 && !slices.ContainsFunc(sp.pids, func(pid int64) bool { return pid != sp.pids[0] }):
		res.PutInt(keyPID, sp.pids[0])
		return splitNone, cls, true
	}
	b.askCatalog(claims(res))
	b.countStaying(b.why[cls.off:])
	b.why = b.why[:cls.off] // rp is not joined
	if len(sp.moving) == 0 {
		return splitDone, cls, false
	}
	b.makeCopies(rps, rp)
	if len(sp.moving) == 0 {
		return splitDone, cls, false
	}
	b.moveSamples(rp)
	b.cnt.ResourcesSplit++
	if len(sp.moving) == len(sp.groups) && without == 0 && !holdsPayload(rp) {
		return splitEmptied, cls, false
	}
	return splitDone, cls, false
}

// holdsPayload reports whether a profile of rp has an original payload,
// which the copies do not get: rp stays for it, even without samples.
func holdsPayload(rp pprofile.ResourceProfiles) bool {
	for _, scope := range rp.ScopeProfiles().All() {
		for _, p := range scope.Profiles().All() {
			if p.OriginalPayload().Len() > 0 {
				return true
			}
		}
	}
	return false
}

// askCatalog decides which groups move (b.split.moving): those whose PID
// the catalog held at their samples' times, as the resource claims. The
// catalog is asked which PIDs it knows once for all, then about each known
// one; the others are counted.
func (b *batch) askCatalog(cl catalog.Claims) {
	sp := &b.split
	sp.moving = sp.moving[:0]
	sp.known = slices.Grow(sp.known[:0], len(sp.pids))[:len(sp.pids)]
	b.cat.Known(sp.pids, sp.known)
	for i := range sp.groups {
		g := &sp.groups[i]
		how := catalog.NoProcess
		if sp.known[i] {
			_, how = b.cat.ProcessWithin(int(sp.pids[i]), g.oldest, g.newest, cl, &b.envBudget)
		}
		switch how {
		case catalog.Found:
			sp.moving = append(sp.moving, int32(i))
		case catalog.NoProcess:
			b.cnt.NoProcess++
			b.cnt.Unmatched[reasonNoProcess] += g.n
		case catalog.OverBudget:
			b.cnt.LookupBudget++
			b.cnt.Unmatched[reasonLookupBudget] += g.n
		default:
			b.cnt.PIDReuse++
			b.cnt.Unmatched[reasonPIDReuse] += g.n
		}
	}
}

// makeCopies gives each process of the moving groups its copy of rp's
// resource, in PID order, as long as the copies fit in the budget; the
// groups of the processes past it stay.
func (b *batch) makeCopies(rps pprofile.ResourceProfilesSlice, rp pprofile.ResourceProfiles) {
	sp := &b.split
	slices.SortFunc(sp.moving, func(x, y int32) int { return cmp.Compare(sp.pids[x], sp.pids[y]) })
	clear(sp.dsts)
	sp.dsts = sp.dsts[:0]
	for i, gi := range sp.moving {
		if i == 0 || sp.pids[gi] != sp.pids[sp.moving[i-1]] {
			sp.dsts = append(sp.dsts, pidCopy{scope: -1, prof: -1})
		}
		sp.groups[gi].dst = int32(len(sp.dsts) - 1)
	}
	n := b.priceCopies(rp)
	if sp.budget < 0 {
		var m pprofile.ProtoMarshaler
		sp.budget = max(m.ProfilesSize(sp.msg), minSplitBudget)
	}
	fit := 0
	for fit < len(sp.dsts) && sp.dsts[fit].cost+n <= sp.budget {
		sp.budget -= sp.dsts[fit].cost + n
		fit++
	}
	sp.moving = slices.DeleteFunc(sp.moving, func(gi int32) bool {
		g := &sp.groups[gi]
		if int(g.dst) < fit {
			return false
		}
		g.dst = -1
		b.cnt.Unmatched[reasonSplitBudget] += g.n
		return true
	})
	clear(sp.dsts[fit:])
	sp.dsts = sp.dsts[:fit]
	for i := range sp.dsts {
		c := &sp.dsts[i]
		c.rp, c.scope, c.prof = rps.AppendEmpty(), -1, -1
		rp.Resource().CopyTo(c.rp.Resource())
		c.rp.SetSchemaUrl(rp.SchemaUrl())
	}
	for _, gi := range sp.moving {
		sp.dsts[sp.groups[gi].dst].rp.Resource().Attributes().PutInt(keyPID, sp.pids[gi])
	}
}

// minSplitBudget is the copies' budget in a message smaller than it: a
// small message of many processes, one sample each, still splits.
const minSplitBudget = 64 << 10

// priceCopies sets each copy's cost in scopes and profiles (without
// samples or payload) and returns the cost of its resource: the bytes
// copying them takes, measured once per scope, profile and resource.
func (b *batch) priceCopies(rp pprofile.ResourceProfiles) (resource int) {
	sp := &b.split
	var m pprofile.ProtoMarshaler
	k := 0
	for si, scope := range rp.ScopeProfiles().All() {
		scopeCost := -1
		for pi, p := range scope.Profiles().All() {
			n := p.Samples().Len()
			profCost := -1
			for _, g := range sp.sample[k : k+n] {
				if g < 0 || sp.groups[g].dst < 0 {
					continue
				}
				c := &sp.dsts[sp.groups[g].dst]
				if c.scope == si && c.prof == pi {
					continue
				}
				if profCost < 0 {
					var h heldParts
					h.take(p)
					profCost = m.ProfileSize(p) + shellOverhead
					h.restore(p)
				}
				if c.scope != si {
					if scopeCost < 0 {
						scopeCost = scopeShellSize(scope)
					}
					c.cost += scopeCost
				}
				c.cost += profCost
				c.scope, c.prof = si, pi
			}
			k += n
		}
	}
	probe := pprofile.NewResourceProfiles()
	rp.Resource().CopyTo(probe.Resource())
	probe.SetSchemaUrl(rp.SchemaUrl())
	probe.Resource().Attributes().PutInt(keyPID, 1<<62)
	return m.ResourceProfilesSize(probe) + shellOverhead
}

// shellOverhead bounds the tag and length prefix of a copied message.
const shellOverhead = 16

// scopeShellSize is the size of scope without its profiles.
func scopeShellSize(scope pprofile.ScopeProfiles) int {
	held := pprofile.NewProfilesSlice()
	scope.Profiles().MoveAndAppendTo(held)
	var m pprofile.ProtoMarshaler
	n := m.ScopeProfilesSize(scope) + shellOverhead
	held.MoveAndAppendTo(scope.Profiles())
	return n
}

// heldParts is what a profile's split-off copies do not get: its samples
// (each moves to its copy) and its original payload, which stays with the
// original alone, since a copy per process would multiply it.
type heldParts struct {
	samples pprofile.SampleSlice
	payload pcommon.ByteSlice
	format  string
}

// take steps p's samples and payload aside (moves, not copies).
func (h *heldParts) take(p pprofile.Profile) {
	h.samples, h.payload, h.format = pprofile.NewSampleSlice(), pcommon.NewByteSlice(), p.OriginalPayloadFormat()
	p.Samples().MoveAndAppendTo(h.samples)
	p.OriginalPayload().MoveTo(h.payload)
	p.SetOriginalPayloadFormat("")
}

func (h *heldParts) restore(p pprofile.Profile) {
	h.samples.MoveAndAppendTo(p.Samples())
	h.payload.MoveTo(p.OriginalPayload())
	p.SetOriginalPayloadFormat(h.format)
}

// groupByPID assigns each valid sample of rp naming a process to the group
// of that PID (b.split.sample), and returns how many samples name none or
// are invalid (why: the samples' verdicts).
func (b *batch) groupByPID(rp pprofile.ResourceProfiles, why []Invalid) (without int) {
	sp := &b.split
	sp.gen++
	// Sized once: a message naming many PIDs would otherwise regrow them.
	sp.sample = slices.Grow(sp.sample[:0], len(why))
	n := min(b.dict.PIDCount(), len(why))
	sp.groups, sp.pids = slices.Grow(sp.groups[:0], n), slices.Grow(sp.pids[:0], n)
	k := 0
	for _, scope := range rp.ScopeProfiles().All() {
		for _, p := range scope.Profiles().All() {
			for _, s := range p.Samples().All() {
				g := int32(-1)
				if _, ai := b.dict.PID(s.AttributeIndices()); ai > 0 && why[k] == validSample {
					g = b.groupOf(ai)
					grp := &sp.groups[g]
					grp.n++
					for _, t := range s.TimestampsUnixNano().All() {
						grp.oldest, grp.newest = minTime(grp.oldest, int64(t)), max(grp.newest, int64(t))
					}
				}
				if g < 0 {
					without++
				}
				sp.sample = append(sp.sample, g)
				k++
			}
		}
	}
	return without
}

// groupOf returns the group of attribute table entry ai (a process.pid).
func (b *batch) groupOf(ai int32) int32 {
	sp := &b.split
	if e := sp.byAttr[ai]; e.gen == sp.gen {
		return e.g
	}
	g := int32(len(sp.groups))
	sp.groups = append(sp.groups, pidGroup{dst: -1})
	sp.pids = append(sp.pids, b.dict.PIDAt(ai))
	sp.byAttr[ai] = genGroup{gen: sp.gen, g: g}
	return g
}

// countStaying counts the samples of a split ResourceProfiles that name no
// process or are invalid: they stay in it, and it is not joined.
func (b *batch) countStaying(why []Invalid) {
	noPID := int64(0)
	for k, g := range b.split.sample {
		switch {
		case why[k] != validSample:
			b.cnt.Invalid[why[k]]++
		case g < 0:
			noPID++
		}
	}
	if noPID > 0 {
		b.cnt.NoPID++
		b.cnt.Unmatched[reasonNoProcess] += noPID
	}
}

// moveSamples moves the samples of the moving groups to their copies, each
// profile's in one pass.
func (b *batch) moveSamples(rp pprofile.ResourceProfiles) {
	sp := &b.split
	k := 0
	for si, scope := range rp.ScopeProfiles().All() {
		for pi, p := range scope.Profiles().All() {
			n := p.Samples().Len()
			marks := sp.sample[k : k+n]
			k += n
			b.makeShells(si, pi, scope, p, marks)
			moves := func(g int32) bool { return g >= 0 && sp.groups[g].dst >= 0 }
			if !slices.ContainsFunc(marks, moves) {
				continue
			}
			samples := p.Samples()
			for j, g := range marks {
				if moves(g) {
					samples.At(j).MoveTo(sp.dsts[sp.groups[g].dst].dstProf.Samples().AppendEmpty())
				}
			}
			j := 0
			samples.RemoveIf(func(pprofile.Sample) bool {
				m := moves(marks[j])
				j++
				return m
			})
		}
	}
}

// makeShells gives each moving group with samples in profile p (profile
// pi of scope si) a copy of p without its samples and payload, in a copy
// of the scope.
func (b *batch) makeShells(si, pi int, scope pprofile.ScopeProfiles, p pprofile.Profile, marks []int32) {
	var held heldParts
	stepped := false
	for _, g := range marks {
		if g < 0 {
			continue
		}
		d := b.split.groups[g].dst
		if d < 0 {
			continue
		}
		grp := &b.split.dsts[d]
		if grp.scope == si && grp.prof == pi {
			continue
		}
		if !stepped {
			held.take(p)
			stepped = true
		}
		if grp.scope != si {
			grp.dstScope = grp.rp.ScopeProfiles().AppendEmpty()
			scope.Scope().CopyTo(grp.dstScope.Scope())
			grp.dstScope.SetSchemaUrl(scope.SchemaUrl())
			grp.scope = si
		}
		grp.dstProf = grp.dstScope.Profiles().AppendEmpty()
		p.CopyTo(grp.dstProf)
		grp.prof = pi
	}
	if stepped {
		held.restore(p)
	}
}
