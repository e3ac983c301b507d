// SPDX-License-Identifier: Apache-2.0

//go:build linux && !amd64 && !arm64

package ptrace

import "errors"

func threadPointer(int) (uint64, error) {
	return 0, errors.New("reading the thread pointer is not implemented on this architecture")
}
