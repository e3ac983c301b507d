// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// event is one sample timestamp of the publisher's process, as the file
// exporter wrote it (after ctxenrich).
type event struct {
	tid     int64
	ts      int64  // the sample's timestamp, Unix ns
	link    string // span id (16 hex) of dictionary.linkTable[linkIndex], "" when unlinked
	trace   string // trace id (32 hex)
	service string // resource service.name, "" when absent
	// endpoint: the sample's datadog.trace_endpoint, else its http.route
	// ("" when neither): the cputime connector's default dimensions.
	endpoint string
	off      int64 // byte offset of the output line that carried it
}

// output tails the file exporter's OTLP JSON file (one ProfilesData per
// line), keeping the publisher's samples.
type output struct {
	path string
	pid  int64

	mu      sync.Mutex
	off     int64  // bytes consumed (complete lines)
	partial []byte // an incomplete last line
	events  []event
	lines   int
	samples int   // sample timestamps of any process
	maxEnd  int64 // latest profile time + duration seen, Unix ns
}

// poll parses the lines written since the last call.
func (o *output) poll() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, err := os.Open(o.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(o.off+int64(len(o.partial)), io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	data = append(o.partial, data...)
	var um pprofile.JSONUnmarshaler
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i]
		lineOff := o.off
		o.off += int64(i + 1)
		data = data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		pd, err := um.UnmarshalProfiles(line)
		if err != nil {
			return fmt.Errorf("%s at byte %d: not OTLP JSON profiles: %w", o.path, lineOff, err)
		}
		o.lines++
		if err := o.add(pd, lineOff); err != nil {
			return err
		}
	}
	o.partial = append([]byte(nil), data...)
	return nil
}

func (o *output) add(pd pprofile.Profiles, off int64) error {
	dict := pd.Dictionary()
	links := dict.LinkTable()
	for _, rp := range pd.ResourceProfiles().All() {
		ra := rp.Resource().Attributes()
		pid := int64(-1)
		if v, ok := ra.Get("process.pid"); ok {
			pid = v.Int()
		}
		service := ""
		if v, ok := ra.Get("service.name"); ok {
			service = v.AsString()
		}
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				if end := int64(prof.Time()) + int64(prof.DurationNano()); end > o.maxEnd {
					o.maxEnd = end
				}
				for _, s := range prof.Samples().All() {
					n := s.TimestampsUnixNano().Len()
					o.samples += n
					if pid != o.pid || n == 0 {
						continue
					}
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
					if err != nil {
						return err
					}
					tid := int64(-1)
					if v, ok := attrs.Get("thread.id"); ok {
						tid = v.Int()
					}
					endpoint := ""
					if v, ok := attrs.Get("datadog.trace_endpoint"); ok {
						endpoint = v.AsString()
					} else if v, ok := attrs.Get("http.route"); ok {
						endpoint = v.AsString()
					}
					var span, trace string
					if i := int(s.LinkIndex()); i > 0 && i < links.Len() {
						l := links.At(i)
						if sid := l.SpanID(); !sid.IsEmpty() {
							span = hex.EncodeToString(sid[:])
							tr := l.TraceID()
							trace = hex.EncodeToString(tr[:])
						}
					}
					for _, ts := range s.TimestampsUnixNano().All() {
						o.events = append(o.events, event{tid: tid, ts: int64(ts), link: span, trace: trace, service: service, endpoint: endpoint, off: off})
					}
				}
			}
		}
	}
	return nil
}

// snapshot returns what has been parsed so far.
func (o *output) snapshot() (events []event, lines, samples int, maxEnd, size int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]event(nil), o.events...), o.lines, o.samples, o.maxEnd, o.off + int64(len(o.partial))
}

// fileSize is the output file's current size (0 before it exists).
func (o *output) fileSize() int64 {
	st, err := os.Stat(o.path)
	if err != nil {
		return 0
	}
	return st.Size()
}
