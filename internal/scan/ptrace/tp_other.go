//go:build !amd64 && !arm64

package ptrace

import "errors"

// threadPointer is only implemented for the architectures otelctx supports.
func threadPointer(int) (uint64, error) {
	return 0, errors.New("reading the thread pointer is not implemented on this architecture")
}
