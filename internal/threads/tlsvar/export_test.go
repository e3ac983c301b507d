// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

// MapsDev is mapsDev, for the external tests.
var MapsDev = mapsDev
