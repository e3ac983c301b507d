// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// hostileSamples is the size of the hostile messages: what any pod that
// reaches the OTLP port can send.
const hostileSamples = 20000

// pidsMessage is one ResourceProfiles without process.pid whose samples
// name pids different PIDs (none of them in the catalog) through their
// process.pid attribute, one timestamp each.
func pidsMessage(samples, pids int) pprofile.Profiles {
	return pidsMessageAt(samples, pids, t0)
}

// pidsMessageAt is pidsMessage with its samples taken from at on.
func pidsMessageAt(samples, pids int, at time.Time) pprofile.Profiles {
	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	tid := b.Attr("thread.id", int64(7))
	pidAttrs := make([]int32, pids)
	key, table := b.Str("process.pid"), b.Dict.AttributeTable()
	for i := range pidAttrs {
		// Appended directly: the builder's de-duplicating attr is quadratic.
		kv := table.AppendEmpty()
		kv.SetKeyStrindex(key)
		kv.Value().SetInt(int64(500000 + i))
		pidAttrs[i] = int32(table.Len() - 1)
	}
	for i := range samples {
		b.Sample(p, at.Add(time.Duration(i)*time.Microsecond), tid, pidAttrs[i%pids])
	}
	return b.PD
}

// alternatingMessage is one sample of a known thread whose n timestamps
// alternate between the thread's two spans (one value per timestamp), and
// the catalog that knows the thread.
func alternatingMessage(tb testing.TB, c *catalog.Catalog, n int) pprofile.Profiles {
	addCheckout(c, 100, t0)
	observe(tb, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0, t0.Add(time.Second))
	observe(tb, c, 100, 101, span(100, 101, 0xb, 0x2, t0, nil), t0.Add(2*time.Second), t0.Add(3*time.Second))
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	s := b.Sample(p, t0, b.Thread(101)...)
	ts, vals := make([]uint64, n), make([]int64, n)
	for j := range n {
		at := t0.Add(time.Duration(j) * time.Microsecond)
		if j%2 == 1 {
			at = at.Add(2 * time.Second)
		}
		ts[j], vals[j] = uint64(at.UnixNano()), 1
	}
	s.TimestampsUnixNano().FromRaw(ts)
	s.Values().FromRaw(vals)
	return b.PD
}

// resourcesMessage is n ResourceProfiles of process 100, each with one
// sample of thread 101 whose two timestamps are an hour apart, and the
// catalog that knows a history of depth observations of the thread over
// that hour. (resources = 1: one ResourceProfiles with the n samples.)
func resourcesMessage(tb testing.TB, c *catalog.Catalog, n, resources, depth int) pprofile.Profiles {
	addCheckout(c, 100, t0)
	for i := range depth {
		at := t0.Add(time.Duration(i) * time.Hour / time.Duration(depth))
		observe(tb, c, 100, 101, span(100, 101, byte(i), byte(i>>8)|1, at, nil), at)
	}
	b := newProfBuilder()
	th := b.Thread(101)
	var p pprofile.Profile
	for i := range n {
		if i == 0 || resources > 1 {
			p = b.Resource(map[string]any{"process.pid": int64(100)})
		}
		s := b.Sample(p, t0.Add(time.Duration(i)*time.Microsecond), th...)
		s.TimestampsUnixNano().Append(uint64(t0.Add(time.Hour).UnixNano()))
		s.Values().FromRaw([]int64{2})
	}
	return b.PD
}

// payloadMessage is one ResourceProfiles without process.pid whose
// profile carries an original payload of payload bytes and one sample per
// PID of pids cataloged processes, and the catalog that holds them.
func payloadMessage(c *catalog.Catalog, pids, payload int) pprofile.Profiles {
	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	p.SetOriginalPayloadFormat("pprof")
	p.OriginalPayload().FromRaw(make([]byte, payload))
	tid := b.Attr("thread.id", int64(7))
	for i := range pids {
		addProcess(c, 1000+i, t0, fmt.Sprintf("p%d", i))
		b.Sample(p, t0.Add(500*time.Millisecond), tid, b.Attr("process.pid", int64(1000+i)))
	}
	return b.PD
}

// keysThreads and keysStrings shape keysMessage: the threads its samples
// name, and the size of its string table (a million 2-byte strings: 4 MiB
// on the wire).
const (
	keysThreads = 64
	keysStrings = 1 << 20
)

// keysMessage is one ResourceProfiles of a publishing process whose
// keysThreads threads each have a record carrying keys attributes (of 256
// distinct keys), and hostileSamples samples of those threads. The string
// table holds a million strings before the keys (so that finding a key by
// searching the table costs the whole table). With own, each sample carries
// the 256 keys itself (its values win: the join adds nothing, whatever
// keys is); without, it carries only its thread's attributes and gets the
// record's.
func keysMessage(tb testing.TB, c *catalog.Catalog, keys int, own bool) pprofile.Profiles {
	addCheckout(c, 100, t0)
	names := make([]string, 256)
	for i := range names {
		names[i] = string([]byte{'g' + byte(i/16), 'g' + byte(i%16)}) // not hex: no filler equals a key
	}
	for th := range keysThreads {
		attrs := map[string]string{}
		for _, k := range names[:keys] {
			attrs[k] = "record"
		}
		observe(tb, c, 100, 1000+th, span(100, 1000+th, byte(th), 1, t0, attrs), t0, t0.Add(time.Second))
	}
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	threads := make([][]int32, keysThreads)
	for th := range threads {
		threads[th] = b.Thread(1000 + th)
	}
	strs, table := b.Dict.StringTable(), b.Dict.AttributeTable()
	for i := range keysStrings {
		strs.Append(fmt.Sprintf("%02x", i%256))
	}
	var ownAttrs []int32
	if own {
		for _, k := range names {
			// Appended directly: the builder's de-duplicating str and attr
			// search the whole table.
			strs.Append(k)
			kv := table.AppendEmpty()
			kv.SetKeyStrindex(int32(strs.Len() - 1))
			kv.Value().SetStr("own")
			ownAttrs = append(ownAttrs, int32(table.Len()-1))
		}
	}
	for i := range hostileSamples {
		at := t0.Add(time.Duration(i) * time.Second / hostileSamples)
		b.Sample(p, at, append(threads[i%keysThreads][:2:2], ownAttrs...)...)
	}
	return b.PD
}

// BenchmarkHostile measures ctxenrich on messages a hostile sender can
// shape, per sample (pids) or per timestamp (timestamps), against the same
// message without the hostile trait: 20,000 samples naming 20,000 PIDs
// against the same samples naming one; one sample of 20,000 timestamps
// alternating between two spans against one of 2,000; 64 samples naming
// 64 cataloged processes in a profile with a 4 MiB original payload
// against the same without payload; 20,000 samples of threads whose
// records carry 256 keys in a message of a million strings against the
// same with records of one key (keysMessage).
func BenchmarkHostile(b *testing.B) {
	for _, own := range []bool{true, false} {
		for _, keys := range []int{1, 256} {
			b.Run(fmt.Sprintf("strings=%d/own=%t/keys=%d", keysStrings, own, keys), func(b *testing.B) {
				c := testCatalog(b)
				benchConsume(b, c, keysMessage(b, c, keys, own), hostileSamples, "ns/sample")
			})
		}
	}
	for _, pids := range []int{1, hostileSamples} {
		b.Run(fmt.Sprintf("samples=%d/pids=%d", hostileSamples, pids), func(b *testing.B) {
			c := testCatalog(b)
			addCheckout(c, 100, t0) // a publisher, named by none of the samples
			benchConsume(b, c, pidsMessage(hostileSamples, pids), hostileSamples, "ns/sample")
		})
	}
	// As above, each message's samples taken after the last was joined, as
	// a sender varying its messages would: no PID is remembered absent for
	// them, every one costs a /proc look-up as long as the budget lasts.
	for _, pids := range []int{1, hostileSamples} {
		b.Run(fmt.Sprintf("samples=%d/pids=%d/fresh", hostileSamples, pids), func(b *testing.B) {
			c := testCatalog(b)
			addCheckout(c, 100, t0)
			benchConsumeEach(b, c, func() pprofile.Profiles {
				return pidsMessageAt(hostileSamples, pids, time.Now())
			}, hostileSamples, "ns/sample")
		})
	}
	for _, resources := range []int{1, hostileSamples} {
		b.Run(fmt.Sprintf("samples=%d/resources=%d", hostileSamples, resources), func(b *testing.B) {
			c := testCatalog(b)
			benchConsume(b, c, resourcesMessage(b, c, hostileSamples, resources, 4096), hostileSamples, "ns/sample")
		})
	}
	for _, payload := range []int{0, 4 << 20} {
		b.Run(fmt.Sprintf("pids=64/payload=%d", payload), func(b *testing.B) {
			c := testCatalog(b)
			in := payloadMessage(c, 64, payload)
			var m pprofile.ProtoMarshaler
			inSize, outSize := m.ProfilesSize(in), m.ProfilesSize(consumeOnce(c, in))
			benchConsume(b, c, in, 64, "ns/sample")
			// After the loop, which resets reported metrics.
			b.ReportMetric(float64(inSize), "in-B/msg")
			b.ReportMetric(float64(outSize), "out-B/msg")
		})
	}
	for _, n := range []int{2000, hostileSamples} {
		b.Run(fmt.Sprintf("timestamps=%d", n), func(b *testing.B) {
			c := testCatalog(b)
			benchConsume(b, c, alternatingMessage(b, c, n), n, "ns/timestamp")
		})
	}
}

// benchConsume joins copies of in (the copy is not timed) and reports the
// time per unit (n units per message).
func benchConsume(b *testing.B, c *catalog.Catalog, in pprofile.Profiles, n int, unit string) {
	p := testPolicy()
	// The consuming goroutine keeps its thread, whose CPU time is what the
	// shared machine's other load disturbs least.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var wall, cpu time.Duration
	for b.Loop() {
		pd := pprofile.NewProfiles()
		in.CopyTo(pd)
		c0, start := cpuTime(b), time.Now()
		Profiles(c, p, pd)
		wall += time.Since(start)
		cpu += cpuTime(b) - c0
	}
	per := float64(b.N) * float64(n)
	b.ReportMetric(float64(wall.Nanoseconds())/per, unit)
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-"+unit)
}

// benchConsumeEach is benchConsume with a new message from next (not
// timed) for each join.
func benchConsumeEach(b *testing.B, c *catalog.Catalog, next func() pprofile.Profiles, n int, unit string) {
	p := testPolicy()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var wall, cpu time.Duration
	for b.Loop() {
		pd := next()
		c0, start := cpuTime(b), time.Now()
		Profiles(c, p, pd)
		wall += time.Since(start)
		cpu += cpuTime(b) - c0
	}
	per := float64(b.N) * float64(n)
	b.ReportMetric(float64(wall.Nanoseconds())/per, unit)
	b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-"+unit)
}

// consumeOnce returns what the join makes of a copy of in.
func consumeOnce(c *catalog.Catalog, in pprofile.Profiles) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	in.CopyTo(pd)
	Profiles(c, testPolicy(), pd)
	return pd
}
