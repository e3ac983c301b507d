// SPDX-License-Identifier: Apache-2.0

package telemetrytest

import (
	"reflect"
	"strings"
	"testing"
	"unicode"

	"go.opentelemetry.io/otel/metric"
)

// Instruments fills the instrument fields of *dst, a struct whose fields
// are named as mdatagen names a telemetry builder's (FieldName), with
// instruments created on m as metadata.yaml md describes them: a test gets
// the instruments the component's builder would create, without importing
// the component's internal metadata package. A field with no metric in md,
// or of another type than md's kind, fails the test.
func Instruments(t testing.TB, m metric.Meter, md *Metadata, dst any) {
	t.Helper()
	byField := map[string]string{}
	for name, mt := range md.Telemetry.Metrics {
		byField[FieldName(mt.Key)] = name
	}
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, ok := byField[f.Name]
		if !ok {
			t.Fatalf("%s: no metric in metadata.yaml", f.Name)
		}
		mt := md.Telemetry.Metrics[name]
		desc, unit := metric.WithDescription(mt.Description), metric.WithUnit(mt.Unit)
		var inst any
		var err error
		switch k := mt.kind(); k {
		case "sum/int/monotonic=true":
			inst, err = m.Int64Counter(name, desc, unit)
		case "sum/int/monotonic=false":
			inst, err = m.Int64UpDownCounter(name, desc, unit)
		case "gauge/int":
			inst, err = m.Int64Gauge(name, desc, unit)
		case "gauge/double":
			inst, err = m.Float64Gauge(name, desc, unit)
		case "histogram/double":
			inst, err = m.Float64Histogram(name, desc, unit, metric.WithExplicitBucketBoundaries(mt.Histogram.BucketBoundaries...))
		default:
			t.Fatalf("%s: kind %s not supported here", name, k)
		}
		if err != nil {
			t.Fatal(err)
		}
		iv := reflect.ValueOf(inst)
		if !iv.Type().AssignableTo(f.Type) {
			t.Fatalf("%s: %s in metadata.yaml, %s in the struct", f.Name, iv.Type(), f.Type)
		}
		v.Field(i).Set(iv)
	}
}

// acronyms are those mdatagen writes in capitals in an identifier.
var acronyms = map[string]bool{
	"ACL": true, "API": true, "ASCII": true, "CA": true, "CPU": true, "CSS": true, "DNS": true, "EOF": true,
	"GUID": true, "HTML": true, "HTTP": true, "HTTPS": true, "ID": true, "IP": true, "JSON": true, "LHS": true,
	"QPS": true, "RAM": true, "RHS": true, "RPC": true, "SLA": true, "SMTP": true, "SQL": true, "SSH": true,
	"TCP": true, "TLS": true, "TPM": true, "TTL": true, "UDP": true, "UI": true, "UID": true, "UUID": true,
	"URI": true, "URL": true, "UTF8": true, "VM": true, "XML": true, "XMPP": true, "XSRF": true, "XSS": true,
}

// FieldName is the TelemetryBuilder field mdatagen names after a
// telemetry.metrics key (its FormatIdentifier, exported): each part
// between underscores title-cased, acronyms in capitals
// (tls_resolutions: TLSResolutions).
func FieldName(key string) string {
	var titled strings.Builder
	for _, part := range strings.Split(key, "_") {
		if part != "" {
			titled.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	var out, word strings.Builder
	flush := func() {
		if acronyms[strings.ToUpper(word.String())] {
			out.WriteString(strings.ToUpper(word.String()))
		} else {
			out.WriteString(word.String())
		}
		word.Reset()
	}
	for _, r := range titled.String() {
		if unicode.IsUpper(r) || unicode.IsNumber(r) {
			flush()
		}
		word.WriteRune(r)
	}
	flush()
	return out.String()
}
