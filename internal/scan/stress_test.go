// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// stressReads is how many times the read protocol runs against a writer
// that updates in place as fast as it can.
const stressReads = 20000

// TestConcurrentUpdatesNeverTorn races the read protocol against the C
// publisher's stress writer, which rewrites the payload in place byte by
// byte with the same sequence number at both ends (seq.a first in the
// resource, seq.b last in the extra attributes). Every read the protocol
// accepts must be consistent: seq.a == seq.b. Reads that lost the race
// must be reported as ErrConcurrentUpdate, never as data.
func TestConcurrentUpdatesNeverTorn(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "stress", "service.instance.id", "stress-1")
		p.Do("schema tlsdesc_v1_dev")
		p.Do("keymap http.route")
		p.Do("placement inline")
		addr, stamp0 := p.Publish()
		f.waitEvent(publisher.Found, p.PID)

		p.Do("stress start")
		stopped := false
		stop := func() uint64 {
			stopped = true
			n, err := strconv.ParseUint(p.Do("stress stop")[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		defer func() {
			if !stopped {
				stop()
			}
		}()

		mem := remote.Memory{PID: p.PID}
		lim := processctx.DefaultLimits()
		// The writer thread has started once the stamp moved.
		deadline := time.Now().Add(scanTimeout)
		for {
			s, err := processctx.ReadStamp(mem, addr)
			if err != nil {
				t.Fatal(err)
			}
			if s != stamp0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stress writer did not start")
			}
		}
		var (
			buf                                   []byte
			ok, consistent, retries, concurrent   int
			inconsistent, decodeErrors, otherErrs int
			seqs                                  = map[string]bool{}
		)
		for i := 0; i < stressReads; i++ {
			raw, rs, err := processctx.ReadRaw(mem, addr, lim.MaxPayloadSize, processctx.DefaultAttempts, buf)
			retries += rs.Retries
			switch {
			case errors.Is(err, processctx.ErrConcurrentUpdate):
				concurrent++
				continue
			case err != nil:
				otherErrs++
				t.Errorf("read %d: %v", i, err)
				continue
			}
			buf = raw.Payload[:0]
			ok++
			c, _, err := processctx.Decode(raw.Payload, lim)
			if err != nil {
				decodeErrors++
				t.Errorf("read %d: a payload the protocol accepted does not decode: %v", i, err)
				continue
			}
			a := attr(c.Resource.Attributes, "seq.a").Str
			b := attr(c.Attributes, "seq.b").Str
			if a == "" || a != b {
				inconsistent++
				if inconsistent <= 5 {
					t.Errorf("read %d: torn payload accepted: seq.a %q seq.b %q (stamp %d)", i, a, b, raw.PublishedAtNs)
				}
				continue
			}
			consistent++
			seqs[a] = true
		}

		// The same through the Scanner: every Found/Updated it reports is
		// consistent, and the writer's races never cost the context.
		var updated, scanRetries, scanConcurrent int
		const scans = 2000
		for i := 0; i < scans; i++ {
			evs, st := f.scan()
			scanRetries += st.Retries
			scanConcurrent += st.Failures[scan.ReasonConcurrentUpdate]
			for _, e := range evs {
				if e.Kind != publisher.Updated {
					t.Fatalf("scan %d: %v event during updates: a concurrent update must be transient", i, e.Kind)
				}
				updated++
				a := attr(e.Process.Context.Resource.Attributes, "seq.a").Str
				if b := attr(e.Process.Context.Attributes, "seq.b").Str; a == "" || a != b {
					t.Fatalf("scan %d: torn context reported: seq.a %q seq.b %q", i, a, b)
				}
			}
		}
		if _, tracked := f.s.Lookup(p.PID); !tracked {
			t.Fatal("the publisher is no longer tracked after the stress")
		}

		updates := stop()
		t.Logf("%s: writer updates %d; ReadRaw: reads %d, ok %d, consistent %d (distinct seq %d), inconsistent %d, decode errors %d, ErrConcurrentUpdate %d, retries %d",
			libc.Name(), updates, stressReads, ok, consistent, len(seqs), inconsistent, decodeErrors, concurrent, retries)
		t.Logf("%s: Scanner: scans %d, Updated %d, retries %d, concurrent_update failures %d",
			libc.Name(), scans, updated, scanRetries, scanConcurrent)
		if inconsistent != 0 || decodeErrors != 0 || otherErrs != 0 {
			t.Fatalf("%d inconsistent reads, %d undecodable, %d other errors", inconsistent, decodeErrors, otherErrs)
		}
		// Without these the test would prove nothing.
		if updates == 0 || consistent == 0 || len(seqs) < 2 {
			t.Fatalf("no race took place: %d updates, %d consistent reads of %d sequence numbers", updates, consistent, len(seqs))
		}
		if retries == 0 && concurrent == 0 {
			t.Fatalf("the reader never met an update in %d reads: the race was not exercised", stressReads)
		}
		if updated == 0 {
			t.Fatal("the Scanner never reported an update in the stress")
		}
	})
}
