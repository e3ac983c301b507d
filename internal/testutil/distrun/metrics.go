// SPDX-License-Identifier: Apache-2.0

//go:build linux

package distrun

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FreePort is a TCP port free on 127.0.0.1 now (for Config.MetricsPort).
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Metric sums the samples of the collector's metric name whose labels
// contain every one of labels (`reason="user_share"`), from its Prometheus
// endpoint on port; ok is false when the endpoint does not answer or has
// no such sample (yet).
func Metric(port int, name string, labels ...string) (sum float64, ok bool) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, name)
		if !found || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		matched := true
		for _, l := range labels {
			matched = matched && strings.Contains(rest, l)
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if !matched || len(f) < 1 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
			ok = true
		}
	}
	return sum, ok
}
