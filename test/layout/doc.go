// SPDX-License-Identifier: Apache-2.0

// Package layout holds a test that keeps the import arrows of the
// repository's packages pointing down: discovery and thread capture on the
// formats, the /proc readers and the shared data model, the catalog above
// both, the join above the catalog, components on top, and test support
// used by tests only.
package layout
