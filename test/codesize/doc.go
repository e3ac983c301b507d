// SPDX-License-Identifier: Apache-2.0

// Package codesize holds a test that keeps the repository's Go files and
// functions reviewable: no non-generated, non-test .go file over MaxFileLines
// lines and no function over MaxFuncLines lines, except those on the test's
// allowlist, each with its reason; and the repository small: no tracked file
// over MaxTrackedBytes outside a testdata directory.
package codesize

// Limits checked by the test.
const (
	MaxFileLines = 500
	MaxFuncLines = 80
)
