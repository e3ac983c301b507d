// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/publisher"
)

// rpClass is the classification of one ResourceProfiles' samples:
// b.why[off:off+n], and the oldest and newest time of the valid ones (Unix
// ns, 0: none).
type rpClass struct {
	off, n         int
	oldest, newest int64
}

// rpPlan is what joining one ResourceProfiles needs, decided before any is
// joined: the histories of a process's threads are then copied once per
// message, for the span of all its ResourceProfiles.
type rpPlan struct {
	rp   pprofile.ResourceProfiles
	cls  rpClass
	proc *publisher.Process
	how  join
}

// plan classifies rp (unless splitByPID did: cls) and looks up its
// process; the process's span in the message grows to cover rp's samples.
func (b *batch) plan(rp pprofile.ResourceProfiles, cls rpClass, classified bool) {
	if !classified {
		cls = b.classify(rp)
	}
	pl := rpPlan{rp: rp, cls: cls, how: joinNoPID}
	res := rp.Resource().Attributes()
	if v, ok := res.Get(keyPID); ok {
		if pid, ok := intValue(v); ok {
			pl.proc, pl.how = lookup(b.cat, res, pid, cls.oldest, cls.newest, &b.envBudget)
		}
	}
	if pl.how == joinOK {
		w, ok := b.spans[pl.proc.ID]
		if !ok {
			w = [2]int64{cls.oldest, cls.newest}
		}
		b.spans[pl.proc.ID] = [2]int64{minTime(w[0], cls.oldest), max(w[1], cls.newest)}
	}
	b.plans = append(b.plans, pl)
}

// joinResourceProfiles merges the process's resource attributes into the
// planned ResourceProfiles and joins its samples with their threads'
// records.
func (b *batch) joinResourceProfiles(pl *rpPlan) {
	why := b.why[pl.cls.off : pl.cls.off+pl.cls.n]
	switch pl.how {
	case joinNoPID:
		b.cnt.NoPID++
		b.countAll(why, reasonNoProcess)
		return
	case joinNoProcess:
		b.cnt.NoProcess++
		b.countAll(why, reasonNoProcess)
		return
	case joinPIDReuse:
		b.cnt.PIDReuse++
		b.countAll(why, reasonPIDReuse)
		return
	case joinLookupBudget:
		b.cnt.LookupBudget++
		b.countAll(why, reasonLookupBudget)
		return
	}
	b.policy.merge(b.cat, pl.rp.Resource().Attributes(), pl.proc, &b.cnt)
	b.gen++ // another ResourceProfiles: the thread slots of the previous one are void
	// Histories are copied for the span of the process's samples in the
	// whole message (oldest, newest); an observation within match_window
	// of a sample may vouch for it.
	span, w := b.spans[pl.proc.ID], int64(b.policy.MatchWindow)
	b.from, b.to = span[0]-w, span[1]+w
	if b.to < span[1] {
		b.to = math.MaxInt64
	}
	b.proc = pl.proc.ID
	k := 0
	for _, sp := range pl.rp.ScopeProfiles().All() {
		for _, prof := range sp.Profiles().All() {
			samples := prof.Samples()
			// Samples appended by splitByRecord are joined when made.
			for i := range samples.Len() {
				if why[k] != validSample {
					b.cnt.Invalid[why[k]]++
				} else {
					b.joinSample(samples, i)
				}
				k++
			}
		}
	}
}

// classify checks each sample of rp, appending the verdicts to b.why.
func (b *batch) classify(rp pprofile.ResourceProfiles) rpClass {
	n := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			n += p.Samples().Len()
		}
	}
	cls := rpClass{off: len(b.why), n: n}
	b.why = slices.Grow(b.why, n)
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				why := Invalid(b.dict.Check(s))
				first, last := cls.oldest, cls.newest
				if why == validSample {
					for _, t := range s.TimestampsUnixNano().All() {
						if t > math.MaxInt64 {
							why = invalidTimestamp
							break
						}
						first, last = minTime(first, int64(t)), max(last, int64(t))
					}
				}
				if why == validSample {
					cls.oldest, cls.newest = first, last
				}
				b.why = append(b.why, why)
			}
		}
	}
	return cls
}

// countAll counts the samples of a ResourceProfiles that is not joined.
func (b *batch) countAll(why []Invalid, r Reason) {
	for _, w := range why {
		if w != validSample {
			b.cnt.Invalid[w]++
		} else {
			b.cnt.Unmatched[r]++
		}
	}
}
