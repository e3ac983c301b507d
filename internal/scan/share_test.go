// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestUserShare: one user (nobody) starts as many publishers as there are
// tracked-process slots, before anyone else: it gets half of them, the rest
// counted as user_share; a publisher of another user (root) started
// afterwards is tracked.
func TestUserShare(t *testing.T) {
	const slots = 4
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for range slots {
		p := testpub.StartAs(t, testpub.Glibc, nobody)
		p.Publish()
		f.own(p.PID)
	}
	evs, st := f.scan()
	if len(evs) != slots/2 || st.Failures[scan.ReasonUserShare] != slots/2 || st.Failures[scan.ReasonProcessLimit] != 0 {
		t.Fatalf("nobody's %d publishers: events %s, stats %+v; want %d found, %d refused as user_share", slots, describe(evs), st, slots/2, slots/2)
	}
	for _, e := range evs {
		if e.Process.UID != 65534 {
			t.Fatalf("publisher %d: UID %d, want 65534", e.Process.ID.PID, e.Process.UID)
		}
	}
	root := testpub.Start(t, testpub.Glibc)
	root.Publish()
	f.own(root.PID)
	evs, st = f.scan()
	if e := findEvent(evs, publisher.Found, root.PID); e == nil || e.Process.UID != 0 || st.ContextsTracked != slots/2+1 {
		t.Fatalf("root's publisher beside nobody's: events %s, stats %+v", describe(evs), st)
	}
}

// TestSharesEvictAtTheBound: three users (UIDs 65531-65533) each start as
// many publishers as there are slots, one after the other: the first gets
// half, the second a third, the third what is left, and every slot is
// taken; a publisher of a fourth user (root) started afterwards is tracked
// all the same: the user holding the most (the first) lets go of one, which
// is announced Lost and counted as evicted. Before: refused as
// process_limit, shares being checked only at admission.
func TestSharesEvictAtTheBound(t *testing.T) {
	const slots = 6
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	byUID := map[int][]int{}
	for uid := 65531; uid <= 65533; uid++ {
		for range slots {
			p := testpub.StartAs(t, testpub.Glibc, &syscall.Credential{Uid: uint32(uid), Gid: 65534})
			p.Publish()
			f.own(p.PID)
			byUID[uid] = append(byUID[uid], p.PID)
		}
		f.scan()
	}
	_, st := f.scan()
	if st.ContextsTracked != slots {
		t.Fatalf("three users' publishers: %d tracked, want every slot (%d)", st.ContextsTracked, slots)
	}
	root := testpub.Start(t, testpub.Glibc)
	root.Publish()
	f.own(root.PID)
	evs, st := f.scan()
	lost := 0
	for _, e := range evs {
		if e.Kind == publisher.Lost {
			lost++
			if e.Process.UID != 65531 {
				t.Errorf("publisher %d of UID %d let go, want one of UID 65531 (holding the most)", e.Process.ID.PID, e.Process.UID)
			}
		}
	}
	if findEvent(evs, publisher.Found, root.PID) == nil || lost != 1 || st.Evicted != 1 || st.ContextsTracked != slots {
		t.Fatalf("root's publisher beside three users': events %s, stats %+v", describe(evs), st)
	}
}

// TestMemoryShareEvicts: a user (nobody) whose publishers' contexts (12 KiB
// of attributes each) take MaxContextMemory gets no more of them tracked
// (memory_share), and a publisher of another user (root) is tracked all the
// same: nobody lets go of one.
func TestMemoryShareEvicts(t *testing.T) {
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	start := func(f *fixture) *testpub.Publisher {
		p := testpub.StartAs(t, testpub.Glibc, nobody)
		for i := range 4 {
			p.Set(fmt.Sprintf("big.%d", i), strings.Repeat("x", 3000))
		}
		p.Publish()
		f.own(p.PID)
		return p
	}
	probe := newFixture(t, scan.Options{})
	start(probe)
	_, st := probe.scan()
	cost := st.ContextMemory
	if st.ContextsTracked != 1 || cost < 12000 {
		t.Fatalf("one publisher: stats %+v, want one tracked costing 12 KB or more", st)
	}

	f := newFixture(t, scan.Options{MaxContextMemory: 3*cost + cost/2})
	for range 4 {
		start(f)
	}
	evs, st := f.scan()
	if len(evs) != 3 || st.Failures[scan.ReasonMemoryShare] != 1 || st.ContextMemory != 3*cost {
		t.Fatalf("nobody's 4 publishers: events %s, stats %+v; want 3 tracked, 1 refused as memory_share", describe(evs), st)
	}
	root := testpub.Start(t, testpub.Glibc)
	for i := range 4 {
		root.Set(fmt.Sprintf("big.%d", i), strings.Repeat("x", 3000))
	}
	root.Publish()
	f.own(root.PID)
	evs, st = f.scan()
	if findEvent(evs, publisher.Found, root.PID) == nil || st.Evicted != 1 || len(evs) != 2 || st.ContextMemory > 3*cost+cost/2 {
		t.Fatalf("root's publisher beside nobody's: events %s, stats %+v", describe(evs), st)
	}
}

// TestUserNamespaceIsOneUser: eight publishers run by nobody's user
// namespace under the eight UIDs it maps (host UIDs 300000-300007, as a
// subordinate range gives rootless Podman) are charged to nobody, the
// namespace's creator (Process.Owner), and get one user's share of the
// slots (half), not eight users'; root's publisher started afterwards is
// tracked. Before (shares by real UID): the eight took every slot.
func TestUserNamespaceIsOneUser(t *testing.T) {
	const slots = 8
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	ns := testenv.MintingNamespace(t, 65534, 300000, slots)
	for uid := range slots {
		argv := testenv.EnterArgs(t, ns, uid, testpub.Build(t, testpub.Glibc))
		p := testpub.StartBinary(t, argv[0], argv[1:]...)
		p.Publish()
		f.own(p.PID)
	}
	evs, st := f.scan()
	if len(evs) != slots/2 || st.Failures[scan.ReasonUserShare] != slots/2 {
		t.Fatalf("eight namespaced publishers: events %s, stats %+v; want %d found, %d refused as user_share", describe(evs), st, slots/2, slots/2)
	}
	for _, e := range evs {
		if e.Process.UID < 300000 || e.Process.Owner != 65534 {
			t.Fatalf("publisher %d: UID %d, owner %d; want a UID from 300000, owner 65534", e.Process.ID.PID, e.Process.UID, e.Process.Owner)
		}
	}
	root := testpub.Start(t, testpub.Glibc)
	root.Publish()
	f.own(root.PID)
	evs, st = f.scan()
	if e := findEvent(evs, publisher.Found, root.PID); e == nil || e.Process.Owner != 0 || st.Evicted != 0 {
		t.Fatalf("root's publisher beside the namespaced ones: events %s, stats %+v", describe(evs), st)
	}
}

// TestGrownContextShed: a context that grows when republished is charged
// again: past MaxContextMemory the user holding the most (nobody, whose
// context grew) lets go of it after the round, and root's publisher stays.
// Before the round's shed: both tracked past the bound.
func TestGrownContextShed(t *testing.T) {
	grow := func(p *testpub.Publisher) {
		for i := range 4 {
			p.Set(fmt.Sprintf("big.%d", i), strings.Repeat("x", 3000))
		}
		p.Publish()
	}
	probe := newFixture(t, scan.Options{})
	small := testpub.Start(t, testpub.Glibc)
	small.Publish()
	probe.own(small.PID)
	_, st := probe.scan()
	smallCost := st.ContextMemory
	grow(small)
	_, st = probe.scanUntil("the grown context read", func(_ []publisher.Event, st scan.Stats) bool { return st.ContextMemory > smallCost })
	bigCost := st.ContextMemory

	f := newFixture(t, scan.Options{MaxContextMemory: bigCost + smallCost - 1})
	root := testpub.Start(t, testpub.Glibc)
	root.Publish()
	nobody := testpub.StartAs(t, testpub.Glibc, &syscall.Credential{Uid: 65534, Gid: 65534})
	nobody.Publish()
	f.own(root.PID, nobody.PID)
	if evs, st := f.scan(); len(evs) != 2 || st.ContextMemory != 2*smallCost {
		t.Fatalf("two small contexts: events %s, stats %+v", describe(evs), st)
	}
	grow(nobody)
	evs, st := f.scanUntil("nobody's grown context let go", func(evs []publisher.Event, _ scan.Stats) bool {
		return findEvent(evs, publisher.Lost, nobody.PID) != nil
	})
	if st.Evicted != 1 || st.ContextsTracked != 1 || st.ContextMemory != smallCost || findEvent(evs, publisher.Lost, root.PID) != nil {
		t.Fatalf("after nobody's context grew: events %s, stats %+v", describe(evs), st)
	}
}

// TestContainersAreShares: root's publishers in two containers' cgroups
// (no user namespace, as with hostPID) are two shares: container A's four
// get half the slots, container B's then a third of them (not none), and
// root's on the host is tracked beside them. Before (shares by real UID):
// every one of them root's, two tracked in all.
func TestContainersAreShares(t *testing.T) {
	const slots = 6
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	attrs := testenv.ContainerCgroups(t, "docker-"+strings.Repeat("a1", 32)+".scope", "docker-"+strings.Repeat("b2", 32)+".scope")
	tracked := func(evs []publisher.Event, pids []int) (n int) {
		for _, pid := range pids {
			if findEvent(evs, publisher.Found, pid) != nil {
				n++
			}
		}
		return n
	}
	var inA, inB []int
	for range slots {
		p := testpub.StartWith(t, testpub.Glibc, attrs[0])
		p.Publish()
		f.own(p.PID)
		inA = append(inA, p.PID)
	}
	evs, st := f.scan()
	if n := tracked(evs, inA); n != slots/2 {
		t.Fatalf("container A's %d publishers: %d tracked (stats %+v), want %d", slots, n, st, slots/2)
	}
	for range slots {
		p := testpub.StartWith(t, testpub.Glibc, attrs[1])
		p.Publish()
		f.own(p.PID)
		inB = append(inB, p.PID)
	}
	evs, st = f.scan()
	if n := tracked(evs, inB); n != slots/3 {
		t.Fatalf("container B's %d publishers beside A's: %d tracked (stats %+v), want %d", slots, n, st, slots/3)
	}
	for _, e := range evs {
		if e.Kind == publisher.Found && (e.Process.UID != 0 || e.Process.Owner >= 0) {
			t.Fatalf("publisher %d in container B: UID %d, owner %d; want UID 0 charged to its container (a negative key)", e.Process.ID.PID, e.Process.UID, e.Process.Owner)
		}
	}
	host := testpub.Start(t, testpub.Glibc)
	host.Publish()
	f.own(host.PID)
	evs, st = f.scan()
	if e := findEvent(evs, publisher.Found, host.PID); e == nil || e.Process.Owner != 0 {
		t.Fatalf("root's publisher on the host beside the containers': events %s, stats %+v", describe(evs), st)
	}
}

// TestContainerOfManyUIDsIsOneShare: eight publishers in one container's
// cgroup under eight UIDs (70001-70008: root in a container without a user
// namespace can take any) are the container's one share: half the slots,
// the rest refused as user_share; root's publisher on the host started
// afterwards is tracked. Before (shares by real UID): the eight took every
// slot.
func TestContainerOfManyUIDsIsOneShare(t *testing.T) {
	const slots = 8
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	attr := testenv.ContainerCgroups(t, "cri-containerd-"+strings.Repeat("c3", 32)+".scope")[0]
	for i := range slots {
		a := *attr
		a.Credential = &syscall.Credential{Uid: uint32(70001 + i), Gid: uint32(70001 + i)}
		p := testpub.StartWith(t, testpub.Glibc, &a)
		p.Publish()
		f.own(p.PID)
	}
	evs, st := f.scan()
	if len(evs) != slots/2 || st.Failures[scan.ReasonUserShare] != slots/2 {
		t.Fatalf("eight UIDs' publishers in one container: events %s, stats %+v; want %d found, %d refused as user_share", describe(evs), st, slots/2, slots/2)
	}
	for _, e := range evs {
		if e.Process.Owner != evs[0].Process.Owner || e.Process.Owner >= 0 {
			t.Fatalf("publisher %d (UID %d) charged to %d, the first to %d; want one container key", e.Process.ID.PID, e.Process.UID, e.Process.Owner, evs[0].Process.Owner)
		}
	}
	host := testpub.Start(t, testpub.Glibc)
	host.Publish()
	f.own(host.PID)
	evs, st = f.scan()
	if e := findEvent(evs, publisher.Found, host.PID); e == nil || e.Process.Owner != 0 {
		t.Fatalf("root's publisher on the host beside the container's: events %s, stats %+v", describe(evs), st)
	}
}

// TestMemoryShareRefusedUnread: a publisher refused as memory_share is
// looked at again without its context being read while its user still
// holds the most: it now publishes garbage, and the look counts
// memory_share, not malformed_payload; once the user's tracked publisher
// has exited, the next look reads it (malformed_payload).
func TestMemoryShareRefusedUnread(t *testing.T) {
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	probe := newFixture(t, scan.Options{})
	one := testpub.StartAs(t, testpub.Glibc, nobody)
	one.Publish()
	probe.own(one.PID)
	_, st := probe.scan()
	cost := st.ContextMemory

	f := newFixture(t, scan.Options{MaxContextMemory: cost + cost/2})
	kept := testpub.StartAs(t, testpub.Glibc, nobody)
	kept.Publish()
	f.own(kept.PID)
	if evs, st := f.scan(); len(evs) != 1 {
		t.Fatalf("nobody's first publisher: events %s, stats %+v", describe(evs), st)
	}
	refused := testpub.StartAs(t, testpub.Glibc, nobody)
	refused.Publish()
	f.own(refused.PID)
	if evs, st := f.scan(); len(evs) != 0 || st.Failures[scan.ReasonMemoryShare] != 1 {
		t.Fatalf("nobody's second publisher, room for one: events %s, stats %+v", describe(evs), st)
	}
	refused.Do("garbage 64")
	f.s.Rescan(refused.PID)
	if _, st := f.scan(); st.Failures[scan.ReasonMemoryShare] != 1 || st.Failures[scan.ReasonMalformedPayload] != 0 {
		t.Fatalf("the refused publisher looked at again: stats %+v; want memory_share, its context unread", st)
	}
	kept.Exit()
	f.scanUntil("nobody's tracked publisher lost", func(evs []publisher.Event, _ scan.Stats) bool {
		return findEvent(evs, publisher.Lost, kept.PID) != nil
	})
	f.s.Rescan(refused.PID)
	if _, st := f.scan(); st.Failures[scan.ReasonMalformedPayload] != 1 {
		t.Fatalf("the refused publisher with room again: stats %+v; want its garbage read (malformed_payload)", st)
	}
}
