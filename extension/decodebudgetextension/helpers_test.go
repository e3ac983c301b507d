// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/otelctx/otelctx/internal/testutil/profiletest"
)

// protoField is a length-delimited field num holding body.
func protoField(num int, body []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// emptySampleBomb is an ExportProfilesServiceRequest of one profile holding
// n empty samples (2 bytes each on the wire, some 140 decoded).
func emptySampleBomb(n int) []byte {
	samples := bytes.Repeat([]byte{2<<3 | 2, 0}, n)
	return protoField(1, protoField(2, protoField(2, samples)))
}

// profilerMessage is a message shaped as the OTel eBPF profiler's 5 s
// report of cpus CPUs at 20 Hz: per CPU 100 samples of a thread, each
// with its timestamp, the thread's attributes and the dictionary's stack.
func profilerMessage(tb testing.TB, cpus int) []byte {
	tb.Helper()
	b := profiletest.NewBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(4242), "process.executable.name": "server"})
	for cpu := range cpus {
		attrs := b.Thread(1000 + cpu)
		for i := range 100 {
			b.Sample(p, profiletest.T0.Add(time.Duration(i)*50*time.Millisecond), attrs...)
		}
	}
	raw, err := pprofileotlp.NewExportRequestFromProfiles(b.PD).MarshalProto()
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}
