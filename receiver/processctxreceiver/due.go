// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"container/heap"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

// dueState is when a process's entity_state repeat is due.
type dueState struct {
	at time.Time
	id publisher.ProcessID
}

// dueQueue orders the repeats by due time, so that a round looks only at
// the processes whose repeat is due rather than at every tracked one. An
// entry whose process was announced again since it was queued is stale:
// its due time no longer matches the process's last announcement.
type dueQueue []dueState

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueState)) }
func (q *dueQueue) Pop() any {
	old := *q
	n := len(old) - 1
	e := old[n]
	*q = old[:n]
	return e
}

func (q *dueQueue) add(at time.Time, id publisher.ProcessID) { heap.Push(q, dueState{at: at, id: id}) }

// popDue removes and returns the earliest entry if it is due at now.
func (q *dueQueue) popDue(now time.Time) (dueState, bool) {
	if len(*q) == 0 || now.Before((*q)[0].at) {
		return dueState{}, false
	}
	return heap.Pop(q).(dueState), true
}

// dueSlack: the stale entries a queue may hold beyond one per live entry
// before it is compacted.
const dueSlack = 64

// compactIfStale drops the stale entries (live says which are not) once
// they outnumber the live ones (counted by live) by more than dueSlack: a
// process announced again every round would otherwise leave one entry per
// round until its first due time. The cost is linear in the queue and
// paid at most once per (live + dueSlack) additions.
func (q *dueQueue) compactIfStale(nLive int, live func(dueState) bool) {
	if len(*q) <= 2*nLive+dueSlack {
		return
	}
	kept := (*q)[:0]
	for _, d := range *q {
		if live(d) {
			kept = append(kept, d)
		}
	}
	clear((*q)[len(kept):])
	*q = kept
	heap.Init(q)
}
