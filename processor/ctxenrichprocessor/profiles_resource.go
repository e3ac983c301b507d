package ctxenrichprocessor

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// emptied marks the originals the split moved every sample out of (an
// input ResourceProfiles that came without samples is passed on as is).
func (b *batch) emptied(rp pprofile.ResourceProfiles) bool {
	v, ok := rp.Resource().Attributes().Get(splitMarker)
	return ok && v.Bool()
}

// splitMarker tags, during one message, an original ResourceProfiles whose
// samples all moved to per-process copies. It never leaves the processor:
// such resources are removed.
const splitMarker = "\x00ctxenrich.split"

// splitByPID makes rp a one-process ResourceProfiles: when its resource has
// no process.pid, the samples' process.pid attributes say whose they are;
// one process: the resource gets its process.pid; several: the samples of
// each move to a copy of rp (resource, scopes, profiles without their
// samples) for that process. Samples keep their dictionary indices: the
// dictionary is shared by the whole message, so they stay valid.
func (b *batch) splitByPID(rps pprofile.ResourceProfilesSlice, rp pprofile.ResourceProfiles) {
	res := rp.Resource().Attributes()
	if _, ok := res.Get(keyPID); ok {
		return
	}
	b.pids = b.pids[:0]
	without := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				pid := lookupIdx(s.AttributeIndices(), b.pidOf)
				if pid < 0 {
					without++
				} else if !slices.Contains(b.pids, pid) {
					b.pids = append(b.pids, pid)
				}
			}
		}
	}
	switch {
	case len(b.pids) == 0:
		return
	case len(b.pids) == 1 && without == 0:
		res.PutInt(keyPID, b.pids[0])
		return
	}
	slices.Sort(b.pids) // a deterministic output order
	for _, pid := range b.pids {
		cp := rps.AppendEmpty()
		rp.Resource().CopyTo(cp.Resource())
		cp.SetSchemaUrl(rp.SchemaUrl())
		cp.Resource().Attributes().PutInt(keyPID, pid)
		for _, sp := range rp.ScopeProfiles().All() {
			csp := pprofile.NewScopeProfiles()
			sp.Scope().CopyTo(csp.Scope())
			csp.SetSchemaUrl(sp.SchemaUrl())
			for _, p := range sp.Profiles().All() {
				cprof := pprofile.NewProfile()
				p.CopyTo(cprof)
				cprof.Samples().RemoveIf(func(s pprofile.Sample) bool {
					return lookupIdx(s.AttributeIndices(), b.pidOf) != pid
				})
				if cprof.Samples().Len() > 0 {
					cprof.MoveTo(csp.Profiles().AppendEmpty())
				}
			}
			if csp.Profiles().Len() > 0 {
				csp.MoveTo(cp.ScopeProfiles().AppendEmpty())
			}
		}
	}
	b.cnt.splitCount++
	// What stays is the samples that named no process.
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			p.Samples().RemoveIf(func(s pprofile.Sample) bool {
				return lookupIdx(s.AttributeIndices(), b.pidOf) >= 0
			})
		}
	}
	if without == 0 {
		res.PutBool(splitMarker, true)
	}
}

// joinResourceProfiles merges the process's resource attributes into rp
// and joins its samples with their threads' records.
func (b *batch) joinResourceProfiles(rp pprofile.ResourceProfiles) {
	res := rp.Resource().Attributes()
	nSamples := int64(countSamples(rp))
	v, ok := res.Get(keyPID)
	var pid int64
	if ok {
		pid, ok = intValue(v)
	}
	if !ok {
		b.cnt.noPID++
		b.cnt.unmatched[reasonNoProcess] += nSamples
		return
	}
	// The samples' time span: the PID-reuse guard needs the oldest, and the
	// thread histories are copied for [oldest, newest] only.
	var oldest, newest int64
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				for _, t := range s.TimestampsUnixNano().All() {
					oldest, newest = minTime(oldest, int64(t)), max(newest, int64(t))
				}
			}
		}
	}
	p, j := b.e.lookup(b.cat, res, pid, oldest, newest)
	switch j {
	case joinNoProcess:
		b.cnt.noProcess++
		b.cnt.unmatched[reasonNoProcess] += nSamples
		return
	case joinPIDReuse:
		b.cnt.pidReuse++
		b.cnt.unmatched[reasonPIDReuse] += nSamples
		return
	}
	b.e.merge(res, p)
	b.cnt.joined++
	b.gen++ // a new process: the thread slots of the previous one are void
	// Thread states hold the histories of this window only.
	clear(b.threads)
	// An observation within match_window of a sample may vouch for it.
	w := int64(b.e.cfg.MatchWindow)
	b.from, b.to = oldest-w, newest+w
	b.proc = p.ID
	for _, sp := range rp.ScopeProfiles().All() {
		for _, prof := range sp.Profiles().All() {
			samples := prof.Samples()
			// Samples appended by splitByRecord are joined when made.
			for i := range samples.Len() {
				b.joinSample(pid, samples, i)
			}
		}
	}
}
