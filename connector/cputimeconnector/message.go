// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/cputime"
)

// seriesKey names a series (or a span's dimensions) within one message:
// the resource and, per dimension, the sample's attribute index (-1: the
// sample has none).
type seriesKey struct {
	res  int32
	dims [MaxDimensions]int32
}

// message is what the outputs' readings of one ConsumeProfiles call share:
// its dictionary, its resources and its outcomes. Each output's message
// (seriesMessage, spanMessage) holds one and aggregates the valid CPU
// samples locally (no lock, no allocation per sample) before one merge
// into the interval.
type message struct {
	rd        cputime.Reader
	resources []*resource
	nDims     int
	counts    counts

	// keyBuf and dimBuf: a series' key and dimensions while it is merged.
	keyBuf []byte
	dimBuf []kv
}

// counts are one message's outcomes, recorded once per message.
type counts struct {
	linked, unlinked, unknownService int64
	notCPU                           int64
	invalid                          [8]int64 // by cputime.Invalid
	overflow                         int64
	folded                           int64
}

// profileReader is an output's local aggregate: it reads the samples of
// one CPU profile of resource res (unknown: its service.name is the
// fallback).
type profileReader interface {
	readSamples(samples pprofile.SampleSlice, unit cputime.Unit, period int64, res int32, unknown bool)
}

// reset readies m for pd.
func (m *message) reset(cfg *Config, pd pprofile.Profiles) {
	m.rd.Reset(pd.Dictionary())
	m.resources = m.resources[:0]
	m.counts = counts{}
	m.nDims = len(cfg.Dimensions)
}

// read hands each CPU profile of pd to local, and counts the samples of
// the others.
func (m *message) read(cfg *Config, pd pprofile.Profiles, local profileReader) {
	for _, rp := range pd.ResourceProfiles().All() {
		var res *resource
		resIdx := int32(len(m.resources))
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				samples := p.Samples()
				if samples.Len() == 0 {
					continue
				}
				unit, period := cputime.Classify(pd.Dictionary(), p)
				if unit == cputime.NotCPU {
					m.counts.notCPU += int64(samples.Len())
					continue
				}
				if res == nil {
					res = newResource(cfg, rp)
					m.resources = append(m.resources, res)
				}
				local.readSamples(samples, unit, period, resIdx, res.unknown)
			}
		}
	}
}

// count counts a valid sample s (unknown: of the fallback service).
func (m *message) count(s *cputime.Sample, unknown bool) {
	if s.Link >= 0 {
		m.counts.linked++
	} else {
		m.counts.unlinked++
	}
	if unknown {
		m.counts.unknownService++
	}
}

// reusable reports whether m's buffers are small enough to keep.
func (m *message) reusable() bool { return m.rd.AttributeCount() <= 4*maxScratch }

// key sets k to the series key of sample s of resource res: per
// dimension, the first of its attributes that fills it (the reader picks
// them out).
func (m *message) key(res int32, s *cputime.Sample, k *seriesKey) {
	k.res = res
	copy(k.dims[:m.nDims], s.Keyed[:m.nDims])
}

// sameKey compares the parts of two keys a message sets.
func (m *message) sameKey(x, y *seriesKey) bool {
	if x.res != y.res {
		return false
	}
	for i := range m.nDims {
		if x.dims[i] != y.dims[i] {
			return false
		}
	}
	return true
}

// dims returns the data point attributes of a local key (each
// dimension's value from the sample, else from the resource) and the
// series' identity (the resource's key, then the dimensions), both in the
// message's buffers: valid until the next call.
func (m *message) dims(cfg *Config, key seriesKey) ([]kv, []byte) {
	res := m.resources[key.res]
	m.dimBuf = m.dimBuf[:0]
	for i, d := range cfg.Dimensions {
		if a := key.dims[i]; a >= 0 {
			m.dimBuf = append(m.dimBuf, kv{d.Name, m.rd.AttrValue(a).AsString(), true})
		} else if res.dims[i].ok {
			m.dimBuf = append(m.dimBuf, res.dims[i])
		}
	}
	b := append(m.keyBuf[:0], res.key...)
	b = append(b, 1)
	for _, d := range m.dimBuf {
		b = append(b, d.key...)
		b = append(b, 0)
		b = append(b, d.value...)
		b = append(b, 0)
	}
	m.keyBuf = b
	return m.dimBuf, b
}
