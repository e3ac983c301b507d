// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "container/heap"

// ranking keeps items in a heap by a rank, each item holding its own
// position, so that a change of one item's rank costs O(log n) and the
// first (the biggest holder of a budget) is found in O(1).
type ranking[T comparable] struct {
	items []T
	// before reports whether a ranks ahead of b.
	before func(a, b T) bool
	slot   func(T) *int
}

func (r *ranking[T]) Len() int           { return len(r.items) }
func (r *ranking[T]) Less(i, j int) bool { return r.before(r.items[i], r.items[j]) }
func (r *ranking[T]) Swap(i, j int) {
	r.items[i], r.items[j] = r.items[j], r.items[i]
	*r.slot(r.items[i]), *r.slot(r.items[j]) = i, j
}
func (r *ranking[T]) Push(x any) {
	*r.slot(x.(T)) = len(r.items)
	r.items = append(r.items, x.(T))
}
func (r *ranking[T]) Pop() any {
	n := len(r.items) - 1
	x := r.items[n]
	var zero T
	r.items[n], r.items = zero, r.items[:n]
	*r.slot(x) = -1
	return x
}

func (r *ranking[T]) add(x T)    { heap.Push(r, x) }
func (r *ranking[T]) fix(x T)    { heap.Fix(r, *r.slot(x)) }
func (r *ranking[T]) remove(x T) { heap.Remove(r, *r.slot(x)) }

// first is the item ranked ahead of all others (the zero T when empty).
func (r *ranking[T]) first() T {
	if len(r.items) == 0 {
		var zero T
		return zero
	}
	return r.items[0]
}
