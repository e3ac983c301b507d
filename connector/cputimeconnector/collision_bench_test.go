// SPDX-License-Identifier: Apache-2.0

//go:build linux

package cputimeconnector

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// collisionSeries is the number of series (one sample each) of the
// collision benchmark's messages.
const collisionSeries = 20000

// fixedSeriesHash is the hash the connector's series table used before it
// was seeded (a fixed function of the sample's attribute indices, which
// the sender chooses), kept to craft a message against it.
func fixedSeriesHash(res int32, dims []int32) uint64 {
	h := uint64(uint32(res))
	for _, d := range dims {
		h = (h ^ uint64(uint32(d))) * 0x9e3779b97f4a7c15
	}
	h = (h ^ h>>32) * 0x9e3779b97f4a7c15
	return h >> 32
}

// collisionMessage is one resource's collisionSeries samples, each of its
// own series under the default dimensions (http.route, thread.name; no
// datadog.trace_endpoint), from an attribute table of side routes and as
// many thread names. crafted: the (route, thread) pairs are those the
// fixed hash put within 96 slots of one another in the table the series
// needed (65,536 slots; and, its low bits being the same, in every smaller
// one while it grew), so that linear probing walked one cluster of all of
// them; otherwise the pairs are taken in order.
func collisionMessage(crafted bool) pprofile.Profiles {
	const side = 4096
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "collide", "process.pid": int64(1)}, 100)
	table := b.pd.Dictionary().AttributeTable()
	route, thread := b.str("http.route"), b.str("thread.name")
	first := int32(table.Len())
	for i := range 2 * side {
		kv := table.AppendEmpty() // appended directly: the builder's de-duplicating attr is slower
		if i < side {
			kv.SetKeyStrindex(route)
			kv.Value().SetStr(fmt.Sprintf("/r/%d", i))
		} else {
			kv.SetKeyStrindex(thread)
			kv.Value().SetStr(fmt.Sprintf("t-%d", i-side))
		}
	}
	stack := b.stack("f")
	const slots = 1 << 16
	var dims [3]int32
	dims[1] = -1
	n := 0
	for r := first; r < first+side && n < collisionSeries; r++ {
		for t := first + side; t < first+2*side && n < collisionSeries; t++ {
			dims[0], dims[2] = r, t
			if crafted && fixedSeriesHash(0, dims[:])&(slots-1) >= 96 {
				continue
			}
			b.sample(p, 0, stack, []time.Time{t0}, r, t)
			n++
		}
	}
	if n < collisionSeries {
		panic(fmt.Sprintf("%d crafted series, want %d", n, collisionSeries))
	}
	return b.pd
}

// BenchmarkCollision: the metrics output's ConsumeProfiles of a message of
// 20,000 series crafted to collide under the series table's former fixed
// hash,
// against one of 20,000 ordinary series (the same tables) in the same run:
// CPU ns per sample of the Consume call alone, the interval flushed (not
// timed) after each message.
func BenchmarkCollision(b *testing.B) {
	ctx := context.Background()
	for _, crafted := range []bool{false, true} {
		in := collisionMessage(crafted)
		b.Run(fmt.Sprintf("series=%d/crafted=%t", collisionSeries, crafted), func(b *testing.B) {
			c, _ := newMetrics(b, defaultConfig(), new(consumertest.MetricsSink))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			for b.Loop() {
				c0 := cpuTime(b)
				if err := c.ConsumeProfiles(ctx, in); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - c0
				b.StopTimer()
				c.flush(ctx)
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/collisionSeries, "cpu-ns/sample")
		})
	}
}
