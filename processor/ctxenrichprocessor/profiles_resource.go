package ctxenrichprocessor

import (
	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// joinResourceProfiles merges the process's resource attributes into rp
// and joins its samples with their threads' records.
func (b *batch) joinResourceProfiles(rp pprofile.ResourceProfiles) {
	res := rp.Resource().Attributes()
	// The samples' time span: the PID-reuse guard needs the oldest, and the
	// thread histories are copied for [oldest, newest] only.
	if !b.classified {
		b.classify(rp)
	}
	b.classified = false
	oldest, newest := b.window[0], b.window[1]
	v, ok := res.Get(keyPID)
	var pid int64
	if ok {
		pid, ok = intValue(v)
	}
	if !ok {
		b.cnt.noPID++
		b.countAll(reasonNoProcess)
		return
	}
	p, j := b.e.lookup(b.cat, res, pid, oldest, newest)
	switch j {
	case joinNoProcess:
		b.cnt.noProcess++
		b.countAll(reasonNoProcess)
		return
	case joinPIDReuse:
		b.cnt.pidReuse++
		b.countAll(reasonPIDReuse)
		return
	}
	b.e.merge(res, p)
	b.cnt.joined++
	b.gen++ // a new process: the thread slots and states of the previous one are void
	// An observation within match_window of a sample may vouch for it.
	w := int64(b.e.cfg.MatchWindow)
	b.from, b.to = oldest-w, newest+w
	if b.to < newest {
		b.to = math.MaxInt64
	}
	b.proc = p.ID
	k := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, prof := range sp.Profiles().All() {
			samples := prof.Samples()
			// Samples appended by splitByRecord are joined when made.
			for i := range samples.Len() {
				if why := b.why[k]; why != validSample {
					b.cnt.invalid[why]++
				} else {
					b.joinSample(samples, i)
				}
				k++
			}
		}
	}
}

// classify checks each sample of rp (b.why) and finds the oldest and the
// newest time of the valid ones (b.window; 0: none).
func (b *batch) classify(rp pprofile.ResourceProfiles) {
	n := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			n += p.Samples().Len()
		}
	}
	b.why = slices.Grow(b.why[:0], n)
	var oldest, newest int64
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				why := b.check.sampleWhy(s, b.keyOf)
				first, last := oldest, newest
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
					oldest, newest = first, last
				}
				b.why = append(b.why, why)
			}
		}
	}
	b.window = [2]int64{oldest, newest}
	b.classified = true
}

// countAll counts the samples of a ResourceProfiles that is not joined.
func (b *batch) countAll(r reason) {
	for _, why := range b.why {
		if why != validSample {
			b.cnt.invalid[why]++
		} else {
			b.cnt.unmatched[r]++
		}
	}
}
