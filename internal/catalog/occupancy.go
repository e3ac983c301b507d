// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

// Occupancy is what the catalog holds against its bounds, and what the
// bounds took from it since New.
type Occupancy struct {
	// Processes is the live processes, Retained the exited ones kept.
	Processes, Retained int
	// Threads and Runs are held by live and retained processes alike.
	Threads, Runs int

	MaxRetained, MaxThreads, MaxRuns       int
	MaxThreadsPerProcess, MaxRunsPerThread int
	// RetainedMemory is what the retained exits hold (bytes,
	// publisher.Process.Cost), MaxRetainedMemory its bound.
	RetainedMemory, MaxRetainedMemory int

	// EvictedThreads, EvictedRuns and EvictedRetained count what a bound
	// took to make room (threads with their runs, single runs, exited
	// processes); RefusedThreads the new threads no room was made for.
	EvictedThreads, EvictedRuns, EvictedRetained, RefusedThreads int64
}

func (c *Catalog) Occupancy() Occupancy {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o := c.evictions
	o.Processes, o.Retained, o.Threads, o.Runs = len(c.procs), c.nExited, c.nThreads, c.nEntries
	o.MaxRetained, o.MaxThreads, o.MaxRuns = c.maxRetained, c.maxThreads, c.maxEntries
	o.MaxThreadsPerProcess, o.MaxRunsPerThread = c.maxPerProc, c.depth
	o.RetainedMemory, o.MaxRetainedMemory = c.retainedBytes, c.maxRetainedBytes
	return o
}
