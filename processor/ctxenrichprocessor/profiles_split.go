package ctxenrichprocessor

import (
	"cmp"
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// splitOutcome says what splitByPID did with an original ResourceProfiles.
type splitOutcome uint8

const (
	splitNone    splitOutcome = iota // one process or none named: joined as a whole
	splitDone                        // split or refused: every sample is accounted for, none is left to join
	splitEmptied                     // every sample moved to a copy: the original goes
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
}

// genGroup is a group index valid in generation gen.
type genGroup struct {
	gen uint32
	g   int32
}

func (s *pidSplit) init(nAttrs int) {
	s.byAttr = slices.Grow(s.byAttr[:0], nAttrs)[:nAttrs]
	clear(s.byAttr)
	s.gen = 0
	s.outcomes = s.outcomes[:0]
}

func (s *pidSplit) reset() {
	s.groups, s.byAttr, s.sample, s.moving, s.outcomes = s.groups[:0], s.byAttr[:0], s.sample[:0], s.moving[:0], s.outcomes[:0]
	s.pids, s.known = s.pids[:0], s.known[:0]
	clear(s.dsts) // they hold pdata
	s.dsts = s.dsts[:0]
}

// splitByPID makes rp a one-process ResourceProfiles when its resource has
// no process.pid and its samples' process.pid attributes name processes:
// one process (every sample naming it): the resource gets its process.pid;
// several: the samples of each process the catalog held at their times
// move to a copy of rp (resource, scopes, profiles without their samples)
// for that process. Samples of PIDs the catalog cannot join, samples
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
	b.moveSamples(rp)
	b.cnt.splitCount++
	if len(sp.moving) == len(sp.groups) && without == 0 {
		return splitEmptied, cls, false
	}
	return splitDone, cls, false
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
			_, how = b.cat.ProcessFor(int(sp.pids[i]), g.oldest, g.newest, cl)
		}
		switch how {
		case catalog.Found:
			sp.moving = append(sp.moving, int32(i))
		case catalog.NoProcess:
			b.cnt.noProcess++
			b.cnt.unmatched[reasonNoProcess] += g.n
		default:
			b.cnt.pidReuse++
			b.cnt.unmatched[reasonPIDReuse] += g.n
		}
	}
}

// makeCopies gives each process of the moving groups its copy of rp's
// resource, in PID order.
func (b *batch) makeCopies(rps pprofile.ResourceProfilesSlice, rp pprofile.ResourceProfiles) {
	sp := &b.split
	slices.SortFunc(sp.moving, func(x, y int32) int { return cmp.Compare(sp.pids[x], sp.pids[y]) })
	clear(sp.dsts)
	sp.dsts = sp.dsts[:0]
	for i, gi := range sp.moving {
		g := &sp.groups[gi]
		if i > 0 && sp.pids[gi] == sp.pids[sp.moving[i-1]] {
			g.dst = int32(len(sp.dsts) - 1)
			continue
		}
		c := pidCopy{rp: rps.AppendEmpty(), scope: -1, prof: -1}
		rp.Resource().CopyTo(c.rp.Resource())
		c.rp.SetSchemaUrl(rp.SchemaUrl())
		c.rp.Resource().Attributes().PutInt(keyPID, sp.pids[gi])
		g.dst = int32(len(sp.dsts))
		sp.dsts = append(sp.dsts, c)
	}
}

// groupByPID assigns each valid sample of rp naming a process to the group
// of that PID (b.split.sample), and returns how many samples name none or
// are invalid (why: the samples' verdicts).
func (b *batch) groupByPID(rp pprofile.ResourceProfiles, why []invalid) (without int) {
	sp := &b.split
	sp.gen++
	// Sized once: a message naming many PIDs would otherwise regrow them.
	sp.sample = slices.Grow(sp.sample[:0], len(why))
	n := min(b.nPIDs, len(why))
	sp.groups, sp.pids = slices.Grow(sp.groups[:0], n), slices.Grow(sp.pids[:0], n)
	k := 0
	for _, scope := range rp.ScopeProfiles().All() {
		for _, p := range scope.Profiles().All() {
			for _, s := range p.Samples().All() {
				g := int32(-1)
				if _, ai := lookupAttr(s.AttributeIndices(), b.pidOf); ai > 0 && why[k] == validSample {
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
	sp.pids = append(sp.pids, b.pidOf[ai])
	sp.byAttr[ai] = genGroup{gen: sp.gen, g: g}
	return g
}

// countStaying counts the samples of a split ResourceProfiles that name no
// process or are invalid: they stay in it, and it is not joined.
func (b *batch) countStaying(why []invalid) {
	noPID := int64(0)
	for k, g := range b.split.sample {
		switch {
		case why[k] != validSample:
			b.cnt.invalid[why[k]]++
		case g < 0:
			noPID++
		}
	}
	if noPID > 0 {
		b.cnt.noPID++
		b.cnt.unmatched[reasonNoProcess] += noPID
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
// pi of scope si) a copy of p without its samples, in a copy of the scope.
func (b *batch) makeShells(si, pi int, scope pprofile.ScopeProfiles, p pprofile.Profile, marks []int32) {
	var held pprofile.SampleSlice
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
			// The samples step aside while p is copied (a move, not a copy).
			held = pprofile.NewSampleSlice()
			p.Samples().MoveAndAppendTo(held)
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
		held.MoveAndAppendTo(p.Samples())
	}
}
