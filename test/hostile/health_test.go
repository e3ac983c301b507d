// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// uffdHostile starts hostile publisher A with 64 KiB registered with a
// userfaultfd it never answers; the region's address. Where the kernel
// refuses userfaultfd, the test skips (fails under CI=true).
func uffdHostile(t *testing.T) (*hostile, uint64) {
	t.Helper()
	a := startHostile(t)
	_, reply := a.proc.Ask("uffd")
	f := strings.Fields(reply)
	if len(f) < 2 || f[0] != "ok" {
		testenv.Missing(t, "the kernel refuses userfaultfd to the publisher: "+reply)
	}
	return a, a.uint(f[1])
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// healthStatus is health_check's answer (0 if none).
func healthStatus(addr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestCollectorHealthTurnsWhenWedged: the distribution with health_check
// in component status mode, and a read_timeout (1 h) above stall_timeout
// (1 s), so that publisher A's userfaultfd page wedges the poll round for
// real. The health endpoint answers 200, then non-200 once the round has
// been stuck past stall_timeout, then 200 again when A releases the page
// (the read returns); SIGTERM then stops the collector.
func TestCollectorHealthTurnsWhenWedged(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	a, addr := uffdHostile(t)
	health := freeAddr(t)
	dir := t.TempDir()
	c := &collector{distrun.StartConfig(t, bin, dir, distrun.Config{
		PIDs: []int{a.PID}, CollectionInterval: 100 * time.Millisecond, ThreadSampler: "off",
		Entities: dir + "/events.jsonl", Health: health, ReadTimeout: time.Hour, StallTimeout: time.Second,
	}), dir + "/events.jsonl"}
	eventually(t, "health_check answers 200", func() bool { return healthStatus(health) == http.StatusOK })
	eventually(t, "A announced", func() bool { return c.announced(t, a.PID, "hostile") })

	a.Do("move %#x", addr)
	wedged := time.Now()
	eventually(t, "health_check answers non-200 while the poll round is wedged", func() bool {
		s := healthStatus(health)
		return s != 0 && s != http.StatusOK
	})
	t.Logf("health turned %v after the wedge (stall_timeout 1s)", time.Since(wedged))
	if !strings.Contains(c.Log(), "poll_round") {
		t.Errorf("the collector's log does not say what is stuck (poll_round):\n%s", c.Log())
	}

	a.Do("uffdclose")
	eventually(t, "health_check answers 200 again once the read returned", func() bool { return healthStatus(health) == http.StatusOK })
	c.stopWithin(t, shutdownTimeout)
}

// TestCollectorHungRead: the distribution with its default read_timeout
// (1 s), watching the whole host, while publisher A's payload is in a
// userfaultfd page it never answers. A neighbour B started afterwards is
// announced, and SIGTERM stops the collector although A's read is still
// blocked in the kernel.
func TestCollectorHungRead(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	a, addr := uffdHostile(t)
	dir := t.TempDir()
	c := &collector{distrun.StartConfig(t, bin, dir, distrun.Config{
		CollectionInterval: 100 * time.Millisecond, DiscoveryInterval: 200 * time.Millisecond, ThreadSampler: "off",
		Entities: dir + "/events.jsonl",
	}), dir + "/events.jsonl"}
	eventually(t, "A announced", func() bool { return c.announced(t, a.PID, "hostile") })
	a.Do("move %#x", addr)
	eventually(t, "A's read abandoned (logged)", func() bool {
		return strings.Contains(c.Log(), "a read of a process's memory did not return")
	})
	start := time.Now()
	b := startHostile(t) // well-behaved: it never moves its payload
	eventually(t, "B, started after A's read hung, announced", func() bool { return c.announced(t, b.PID, "hostile") })
	t.Logf("B announced %v after its start (discovery_interval 200ms)", time.Since(start))
	stop := time.Now()
	c.stopWithin(t, shutdownTimeout)
	t.Logf("SIGTERM to exit: %v with A's read blocked", time.Since(stop))
	if err := syscall.Kill(a.PID, 0); err != nil {
		t.Errorf("A exited before the collector stopped (its read was not blocked): %v", err)
	}
}
