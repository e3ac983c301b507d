// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	pc "github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

func str(s string) pc.Value      { return pc.Value{Kind: pc.KindStr, Str: s} }
func i64(n int64) pc.Value       { return pc.Value{Kind: pc.KindInt, Int: n} }
func f64(f float64) pc.Value     { return pc.Value{Kind: pc.KindDouble, Double: f} }
func boolean(b bool) pc.Value    { return pc.Value{Kind: pc.KindBool, Bool: b} }
func raw(b []byte) pc.Value      { return pc.Value{Kind: pc.KindBytes, Bytes: b} }
func arr(v ...pc.Value) pc.Value { return pc.Value{Kind: pc.KindArray, Array: v} }
func kvs(kv ...pc.Attribute) pc.Value {
	return pc.Value{Kind: pc.KindKVList, KVList: kv}
}
func kv(k string, v pc.Value) pc.Attribute { return pc.Attribute{Key: k, Value: v} }

// encode renders v as writeJSON does, compacted for comparison.
func encode(t *testing.T, v any) string {
	t.Helper()
	var b, c bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		t.Fatalf("writeJSON: %v", err)
	}
	if err := json.Compact(&c, b.Bytes()); err != nil {
		t.Fatalf("compact %s: %v", b.String(), err)
	}
	return c.String()
}

func TestJSONValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    pc.Value
		want string
	}{
		{"empty", pc.Value{}, `null`},
		{"string", str("checkout"), `"checkout"`},
		{"string not HTML-escaped", str(`a<b>&"c"` + "\n\t\x00é"), `"a<b>&\"c\"\n\t\u0000é"`},
		{"empty string", str(""), `""`},
		{"true", boolean(true), `true`},
		{"false", boolean(false), `false`},
		{"int zero", i64(0), `0`},
		{"int max", i64(math.MaxInt64), `9223372036854775807`},
		{"int min", i64(math.MinInt64), `-9223372036854775808`},
		{"int above 2^53", i64(1<<53 + 1), `9007199254740993`},
		{"double", f64(1.5), `1.5`},
		{"double negative small", f64(-2.5e-7), `-2.5e-7`},
		{"double large", f64(1e300), `1e+300`},
		{"double NaN", f64(math.NaN()), `"NaN"`},
		{"double +Inf", f64(math.Inf(1)), `"Infinity"`},
		{"double -Inf", f64(math.Inf(-1)), `"-Infinity"`},
		{"bytes", raw([]byte{0, 1, 2, 0xfb, 0xff}), `"AAEC+/8="`},
		{"bytes empty", raw(nil), `""`},
		{"array empty", arr(), `[]`},
		{"array of every scalar", arr(str("a"), i64(-1), f64(0.5), boolean(true), raw([]byte("hi")), pc.Value{}),
			`["a",-1,0.5,true,"aGk=",null]`},
		{"nested arrays", arr(arr(i64(1), arr(i64(2), arr())), arr()), `[[1,[2,[]]],[]]`},
		{"kvlist empty", kvs(), `{}`},
		{"kvlist", kvs(kv("b", i64(2)), kv("a", str("x"))), `{"a":"x","b":2}`},
		{"nested kvlists and arrays",
			kvs(
				kv("outer", kvs(
					kv("list", arr(
						i64(1),
						kvs(kv("deep", kvs(kv("bytes", raw([]byte{0xff}))))),
					)),
				)),
				kv("flag", boolean(false)),
			),
			`{"flag":false,"outer":{"list":[1,{"deep":{"bytes":"/w=="}}]}}`},
		{"array of kvlists", arr(kvs(kv("k", str("v"))), kvs()), `[{"k":"v"},{}]`},
		{"kvlist duplicate key: last wins", kvs(kv("k", i64(1)), kv("k", i64(2))), `{"k":2}`},
		{"kvlist with NaN inside", kvs(kv("n", f64(math.NaN()))), `{"n":"NaN"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := encode(t, jsonValue(tc.v)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestJSONValueMatchesAsRaw: where AsRaw's result encodes, jsonValue encodes
// the same (it only differs on non-finite doubles and nil bytes).
func TestJSONValueMatchesAsRaw(t *testing.T) {
	v := kvs(kv("s", str("x")), kv("i", i64(-7)), kv("d", f64(0.25)), kv("b", boolean(true)),
		kv("y", raw([]byte("bytes"))), kv("a", arr(arr(str("n")), kvs(kv("k", pc.Value{})))))
	asRaw, err := json.Marshal(v.AsRaw())
	if err != nil {
		t.Fatal(err)
	}
	if got := encode(t, jsonValue(v)); got != string(asRaw) {
		t.Errorf("jsonValue %s, AsRaw %s", got, asRaw)
	}
}

func TestContextJSON(t *testing.T) {
	t.Run("minimal", func(t *testing.T) {
		// Nothing published but the header: every specified key present,
		// objects and arrays empty, never null; optional keys omitted.
		p := &publisher.Process{ID: publisher.ProcessID{PID: 42}, Context: pc.Context{PublishedAtNs: 1}}
		want := `{"pid":42,"published_at_ns":1,"resource":{},"attributes":{},` +
			`"threadlocal":{"schema_version":"","attribute_key_map":[]}}`
		if got := encode(t, newContextJSON(p)); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("full", func(t *testing.T) {
		p := &publisher.Process{
			ID:             publisher.ProcessID{PID: 4242, StartTicks: 9},
			ExecutablePath: "/usr/bin/checkout",
			ExecutableName: "checkout",
			Context: pc.Context{
				PublishedAtNs: math.MaxUint64,
				Resource: pc.Resource{
					Attributes: []pc.Attribute{
						kv("service.name", str("checkout")),
						kv("service.instance.id", str("i-1")),
						kv("workers", i64(8)),
						kv("labels", kvs(kv("team", str("pay")), kv("ids", arr(i64(1), i64(2))))),
					},
					DroppedAttributesCount: 3,
					EntityRefs: []pc.EntityRef{
						{Type: "service", IDKeys: []string{"service.name", "service.instance.id"}},
						{Type: "host", IDKeys: []string{"host.id"}, DescriptionKeys: []string{"host.name"}, SchemaURL: "https://x"},
					},
				},
				Attributes: []pc.Attribute{kv("deployment.region", str("eu")), kv("ratio", f64(0.5))},
				ThreadLocal: pc.ThreadLocal{
					SchemaVersion:   "tlsdesc_v1_dev",
					AttributeKeyMap: []string{"http.route", "", "user.tier"},
				},
			},
		}
		want := `{"pid":4242,"published_at_ns":18446744073709551615,` +
			`"resource":{"labels":{"ids":[1,2],"team":"pay"},"service.instance.id":"i-1","service.name":"checkout","workers":8},` +
			`"attributes":{"deployment.region":"eu","ratio":0.5},` +
			`"threadlocal":{"schema_version":"tlsdesc_v1_dev","attribute_key_map":["http.route","","user.tier"]},` +
			`"executable":"/usr/bin/checkout","dropped_attributes_count":3,` +
			`"entity_refs":[{"type":"service","id_keys":["service.name","service.instance.id"],"description_keys":[]},` +
			`{"type":"host","id_keys":["host.id"],"description_keys":["host.name"]}]}`
		if got := encode(t, newContextJSON(p)); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("executable name when the path is unreadable", func(t *testing.T) {
		p := &publisher.Process{ID: publisher.ProcessID{PID: 1}, ExecutableName: "comm"}
		if got := newContextJSON(p).Executable; got != "comm" {
			t.Errorf("executable %q, want comm", got)
		}
	})
}

func TestTextValue(t *testing.T) {
	for _, tc := range []struct {
		v    pc.Value
		want string
	}{
		{pc.Value{}, `(empty)`},
		{str("a\tb\x1b[31m"), `"a\tb\x1b[31m"`},
		{i64(math.MinInt64), `-9223372036854775808`},
		{f64(0.1), `0.1`},
		{f64(math.Inf(-1)), `-Inf`},
		{boolean(true), `true`},
		{raw([]byte{0xde, 0xad}), `bytes(2) 0xdead`},
		{arr(), `[]`},
		{arr(i64(1), arr(str("x"), boolean(false))), `[1, ["x", false]]`},
		{kvs(kv("z", i64(1)), kv("a\nb", kvs(kv("k", arr())))), `{z: 1, "a\nb": {k: []}}`},
	} {
		if got := textValue(tc.v); got != tc.want {
			t.Errorf("textValue(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestCleanText(t *testing.T) {
	for in, want := range map[string]string{
		"checkout":         "checkout",
		"with space":       "with space",
		"unicode é ✓":      "unicode é ✓",
		"":                 `""`,
		"tab\there":        `"tab\there"`,
		"new\nline":        `"new\nline"`,
		"\x1b]0;title\x07": `"\x1b]0;title\a"`,
		"bad utf8 \xff":    `"bad utf8 \xff"`,
		"zero\u200bwidth":  `"zero\u200bwidth"`,
	} {
		if got := cleanText(in); got != want {
			t.Errorf("cleanText(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestWriteText(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	p := &publisher.Process{
		ID:             publisher.ProcessID{PID: 7},
		CreationTime:   created,
		ExecutableName: "svc",
		MappingAddr:    0x7f0000001000,
		MappingName:    "[anon:OTEL_CTX]",
		Context: pc.Context{
			PublishedAtNs: 123,
			Resource: pc.Resource{
				Attributes:             []pc.Attribute{kv("z", str("last")), kv("a", i64(1)), kv("m", raw([]byte{1}))},
				DroppedAttributesCount: 2,
				EntityRefs:             []pc.EntityRef{{Type: "service", IDKeys: []string{"service.name"}, SchemaURL: "https://s"}},
			},
		},
		DecodeStats: pc.DecodeStats{DroppedAttributes: 4, TruncatedValues: 1, DuplicateKeys: 2},
	}
	var b bytes.Buffer
	if err := writeText(&b, p, created.Add(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	want := `pid              7
executable       svc
created          2025-01-02T03:04:05Z (1m30s ago)
mapping          [anon:OTEL_CTX] at 0x7f0000001000
published_at_ns  123

resource attributes (3)
  a                         1
  m                         bytes(1) 0x01
  z                         "last"
  dropped_attributes_count  2

attributes (0)

threadlocal: not published

entity refs (1)
  service  id_keys=[service.name] description_keys=[] schema_url=https://s

note: 4 attribute(s) or list entries dropped by the reader's limits (count, nesting depth): the output is incomplete
note: 1 string or bytes value(s) truncated by the reader's length limit
note: 2 duplicate key(s) in the payload; the last value of each is shown
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantPos  []string
		wantJSON bool
	}{
		{[]string{"1"}, []string{"1"}, false},
		{[]string{"--json", "1"}, []string{"1"}, true},
		{[]string{"1", "--json"}, []string{"1"}, true},
		{[]string{"1", "-json", "2"}, []string{"1", "2"}, true},
		{[]string{"--", "--json"}, []string{"--json"}, false},
		{[]string{"1", "--", "-json"}, []string{"1", "-json"}, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil || !reflect.DeepEqual(pos, tc.wantPos) || *asJSON != tc.wantJSON {
			t.Errorf("%q: positional %q json %v err %v, want %q %v", tc.args, pos, *asJSON, err, tc.wantPos, tc.wantJSON)
		}
	}
}

func TestPIDErrorIsOneLine(t *testing.T) {
	e := &env{common: defaultCommon()}
	err := e.pidError(5, errorString("first\nsecond"))
	if got := oneLine(err.Error()); strings.Contains(got, "\n") || !strings.HasPrefix(got, "pid 5: ") {
		t.Errorf("%q", got)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
