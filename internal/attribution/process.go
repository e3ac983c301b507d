// SPDX-License-Identifier: Apache-2.0

//go:build linux

package attribution

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// DefaultListEvery: while samples of a process with a DD_OTEL_CTX buffer
// come, its threads are listed again at least this often; a sample waits
// (in memory) for the first listing started after it was received.
const DefaultListEvery = 50 * time.Millisecond

// Config describes the process identity whose samples a Process judges.
type Config struct {
	ID publisher.ProcessID
	// Variable is the schema of the thread variable the kernel reads (nil:
	// none); its records carry the schema's Source.
	Variable schema.Schema
	// Buffer is the buffer whose slots the kernel reads (nil: none); its
	// schema (registry.ForBuffer) gives them (BufferSchema.Slots).
	Buffer *publisher.Buffer
	// KeyMap is the process context's threadlocal.attribute_key_map.
	// RefreshKeyMap (nil: none) re-reads it; it is called at most once per
	// key map, when a record uses an index the map lacks (the map is
	// append-only: a newer context may know it).
	KeyMap        []string
	RefreshKeyMap func() ([]string, error)
	// ProcRoot is the procfs mount ("" = "/proc").
	ProcRoot string
	// Now is the clock the thread listings are timed with (nil: time.Now).
	Now func() time.Time
	// ListEvery is how often the threads are listed while samples come
	// (0: DefaultListEvery).
	ListEvery time.Duration
	// Observe receives the observations, in time order per thread. It is
	// called with the Process locked and must not call back into it.
	Observe func(publisher.ProcessID, Observation)
}

// Process judges the samples of one process identity. Its methods may be
// called from several goroutines (the sampler's reader and a timer).
type Process struct {
	mu      sync.Mutex
	cfg     Config
	both    bool // the kernel reads both sources: a capture is two samples
	keyMap  []string
	refresh func() ([]string, error) // nil once used
	now     func() time.Time
	every   time.Duration
	// dd judges DD slots (nil: no DD_OTEL_CTX buffer). With it, samples
	// wait in held for the next thread listing, in the order they came.
	dd       *ddslots.Ownership
	ddSource string // the buffer's schema's Source
	held     []received
	// pending is, per thread, the OTEP 4947 sample of a capture waiting
	// for the DD sample of the same capture (both).
	pending map[int]received
	// latest is, per thread, the last view of each source (0: OTEP 4947,
	// 1: DD), so that a capture missing one source keeps what it showed
	// last (both).
	latest map[int]*[2]*view
}

// received is a sample and when it was received.
type received struct {
	smp sampler.Sample
	at  time.Time
}

// view is what one source showed of a thread.
type view struct {
	source string
	rec    *threadctx.Record // nil: none, reason says why
	attrs  map[string]string
	reason string
	err    error
}

func (v *view) refused() bool { return v.rec == nil && !noContext(v.reason) }

// NewProcess returns the judge of cfg.ID's samples. With a DD buffer it
// lists the process's threads a first time: call it before the kernel
// reads the process. It fails only when that listing does (the process is
// gone).
func NewProcess(cfg Config) (*Process, error) {
	if cfg.Observe == nil {
		return nil, errors.New("attribution: Config.Observe is nil")
	}
	p := &Process{cfg: cfg, both: cfg.Variable != nil && cfg.Buffer != nil, keyMap: cfg.KeyMap, refresh: cfg.RefreshKeyMap,
		now: cfg.Now, every: cfg.ListEvery, pending: map[int]received{}, latest: map[int]*[2]*view{}}
	if p.now == nil {
		p.now = time.Now
	}
	if p.every <= 0 {
		p.every = DefaultListEvery
	}
	if cfg.Buffer != nil {
		s, err := registry.ForBuffer(*cfg.Buffer)
		if err != nil {
			return nil, fmt.Errorf("attribution: %w", err)
		}
		slots, err := s.Slots(*cfg.Buffer)
		if err != nil {
			return nil, fmt.Errorf("attribution: %s buffers are not sampled as slots: %w", s.Name(), err)
		}
		d, err := ddslots.NewOwnership(cfg.ProcRoot, cfg.ID.PID, slots, p.now())
		if err != nil {
			return nil, err
		}
		p.dd, p.ddSource = d, s.Source()
	}
	return p, nil
}

// ID is the process identity judged.
func (p *Process) ID() publisher.ProcessID { return p.cfg.ID }

// SetKeyMap replaces the key map (the process context was updated), with a
// new chance to refresh it.
func (p *Process) SetKeyMap(keyMap []string, refresh func() ([]string, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keyMap, p.refresh = keyMap, refresh
}

// Add takes one sample. Samples of another PID are ignored; so are those
// of a source the process is not read through (the kernel's recipe lagged).
func (p *Process) Add(smp sampler.Sample) {
	if smp.PID != p.cfg.ID.PID {
		return
	}
	if smp.Read == sampler.ReadBufferSlot && p.cfg.Buffer == nil || smp.Read != sampler.ReadBufferSlot && p.cfg.Variable == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dd == nil {
		p.take(smp, time.Time{})
		return
	}
	now := p.now()
	p.held = append(p.held, received{smp: smp, at: now})
	if now.Sub(p.dd.ListedAt()) >= p.every {
		p.flush(now, false)
	}
}

// Tick delivers what waited long enough: held samples once the last
// listing is ListEvery old, a capture's OTEP 4947 sample alone once its
// DD sample has not come within ListEvery. Call it periodically while
// samples may be waiting (a process whose threads stopped running sends
// no further sample to flush them).
func (p *Process) Tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dd == nil {
		return
	}
	now := p.now()
	if now.Sub(p.dd.ListedAt()) >= p.every || len(p.held) == 0 {
		p.flush(now, false)
	}
}

// Flush lists the threads now and delivers every held sample.
func (p *Process) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush(p.now(), false)
}

// Finish delivers everything still waiting (sampling ended).
func (p *Process) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush(p.now(), true)
}

// Waiting reports the samples held for a listing and the captures waiting
// for their DD sample.
func (p *Process) Waiting() (held, pending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held), len(p.pending)
}

// SlotsKnown is the number of DD slots whose last owner is remembered.
func (p *Process) SlotsKnown() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dd == nil {
		return 0
	}
	return p.dd.SlotsKnown()
}

// flush lists the threads again and takes every held sample: all were
// received, so taken, before that listing started. A capture whose DD
// sample has not come within ListEvery is taken alone (final: every one).
func (p *Process) flush(now time.Time, final bool) {
	if p.dd != nil && len(p.held) > 0 {
		p.dd.Relist(now)
		for _, r := range p.held {
			p.take(r.smp, r.at)
		}
		clear(p.held)
		p.held = p.held[:0]
		p.dd.Judged()
		if p.dd.ListOK() {
			for tid := range p.latest {
				if !p.dd.Listed(tid) {
					delete(p.latest, tid) // exited: a reused TID starts afresh
				}
			}
		}
	}
	for tid, w := range p.pending {
		if final || now.Sub(w.at) >= p.every {
			delete(p.pending, tid)
			p.capture(&w.smp, nil)
		}
	}
}

// take pairs the two samples of a capture when the kernel reads both
// sources (the OTEP 4947 one comes first), and records the capture.
func (p *Process) take(smp sampler.Sample, at time.Time) {
	dd := smp.Read == sampler.ReadBufferSlot
	switch {
	case !p.both && dd:
		p.capture(nil, &smp)
	case !p.both:
		p.capture(&smp, nil)
	case !dd:
		if w, ok := p.pending[smp.TID]; ok {
			p.capture(&w.smp, nil) // its DD sample was not emitted
		}
		p.pending[smp.TID] = received{smp: smp, at: at}
	default:
		w, ok := p.pending[smp.TID]
		if !ok {
			p.capture(nil, &smp) // the OTEP 4947 read failed
			return
		}
		delete(p.pending, smp.TID)
		p.capture(&w.smp, &smp)
	}
}

// capture turns one capture of a thread (o, d: its OTEP 4947 and DD
// samples, either nil) into an observation: with both sources, the latest
// view of each (a source missing from the capture keeps its last view),
// merged as threadread.Merge merges a snapshot.
func (p *Process) capture(o, d *sampler.Sample) {
	smp := o
	if smp == nil {
		smp = d
	}
	var ov, dv *view
	if o != nil {
		ov = p.otepView(*o)
	}
	if d != nil {
		j := p.dd.Judge(*d)
		dv = &view{source: p.ddSource, rec: j.Record, reason: j.Reason, err: j.Err}
	}
	fo, fd := ov, dv // read in this capture
	if p.both {
		v := p.latest[smp.TID]
		if v == nil {
			v = &[2]*view{}
			p.latest[smp.TID] = v
		}
		if ov != nil {
			v[0] = ov
		}
		if dv != nil {
			v[1] = dv
		}
		ov, dv = v[0], v[1]
	}
	cur := pick(ov, dv)
	// A view kept from an earlier capture was not read at this moment.
	exact := smp.Followed && (cur == fo || cur == fd)
	obs := Observation{TID: smp.TID, Time: smp.Time, Exact: exact, Source: cur.source,
		Reason: cur.reason, Err: cur.err}
	if cur.rec != nil {
		obs.Record = &catalog.ThreadRecord{PID: p.cfg.ID.PID, TID: smp.TID, SeenAt: smp.Time, Record: *cur.rec,
			Attributes: cur.attrs, Source: cur.source}
	}
	p.cfg.Observe(p.cfg.ID, obs)
}

// pick is what a thread shows given its two sources' views (either nil):
// an OTEP 4947 record, else a DD record, else a view that cannot vouch
// (so the thread keeps what it had) before one that says no context.
func pick(o, d *view) *view {
	switch {
	case d == nil:
		return o
	case o == nil:
		return d
	case o.rec != nil:
		return o
	case d.rec != nil:
		return d
	case o.refused():
		return o
	case d.refused():
		return d
	}
	return o
}

// otepView parses an OTEP 4947 sample and names its attributes.
func (p *Process) otepView(smp sampler.Sample) *view {
	v := &view{source: p.cfg.Variable.Source()}
	switch {
	case smp.NotAllocated:
		v.reason = threadread.ReasonNotAllocated
	case smp.Record == nil:
		v.reason = threadread.ReasonNullPointer
	default:
		r, err := threadctx.Parse(smp.Record)
		switch {
		case errors.Is(err, threadctx.ErrInvalid):
			v.reason, v.err = threadread.ReasonNotValid, err // cleared or being written
		case err != nil:
			v.reason, v.err = ReasonParse, err
		default:
			v.rec, v.attrs = &r, p.name(r)
		}
	}
	return v
}

// name resolves the record's key indexes, refreshing the key map once.
func (p *Process) name(r threadctx.Record) map[string]string {
	named, unknown := r.Named(p.keyMap)
	if len(unknown) == 0 || p.refresh == nil {
		return named
	}
	refresh := p.refresh
	p.refresh = nil
	if km, err := refresh(); err == nil && len(km) > len(p.keyMap) {
		p.keyMap = km
		named, _ = r.Named(km)
	}
	return named
}
