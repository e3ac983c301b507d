// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
)

// sendLoop sends the profiler's samples of the last second as one OTLP
// profile per process, shaped like the OTel eBPF profiler's
// (docs/profiles.md): process.pid on the resource, thread.id and a
// timestamp on each sample.
func (s *soak) sendLoop(prof *fakeprof.Profiler, url string) {
	cl := &http.Client{Timeout: 10 * time.Second}
	period := int64(time.Second) / int64(s.opt.hz)
	for s.pause(time.Second) == nil {
		samples := prof.Take()
		if len(samples) == 0 {
			continue
		}
		body, err := profilesOf(samples, period)
		if err == nil {
			var resp *http.Response
			resp, err = cl.Post(url, "application/x-protobuf", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
		}
		if err != nil {
			s.sendErrors.Add(1)
			continue
		}
		s.sent.Add(int64(len(samples)))
	}
}

func profilesOf(samples []fakeprof.Sample, period int64) ([]byte, error) {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	strs := dict.StringTable()
	strs.Append("", "thread.id", "samples", "count", "cpu", "nanoseconds")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	attrOf := map[int]int32{}
	byPID := map[int]pprofile.Profile{}
	for _, smp := range samples {
		prof, ok := byPID[smp.PID]
		if !ok {
			rp := pd.ResourceProfiles().AppendEmpty()
			rp.Resource().Attributes().PutInt("process.pid", int64(smp.PID))
			prof = rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
			prof.SampleType().SetTypeStrindex(2)
			prof.SampleType().SetUnitStrindex(3)
			prof.PeriodType().SetTypeStrindex(4)
			prof.PeriodType().SetUnitStrindex(5)
			prof.SetPeriod(period)
			prof.SetTime(pcommon.NewTimestampFromTime(smp.Time))
			byPID[smp.PID] = prof
		}
		idx, ok := attrOf[smp.TID]
		if !ok {
			a := dict.AttributeTable().AppendEmpty()
			a.SetKeyStrindex(1)
			a.Value().SetInt(int64(smp.TID))
			idx = int32(dict.AttributeTable().Len() - 1)
			attrOf[smp.TID] = idx
		}
		ps := prof.Samples().AppendEmpty()
		ps.AttributeIndices().Append(idx)
		ps.TimestampsUnixNano().Append(uint64(smp.Time.UnixNano()))
	}
	var m pprofile.ProtoMarshaler
	return m.MarshalProfiles(pd)
}
