// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"errors"
	"fmt"
	"testing"

	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// A refusal over the resolver's bounds has its own reason, also when it
// wraps ErrNotFound (the variable not found once a file was refused).
func TestResolveReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{tlsvar.ErrNotFound, reasonNoSymbol},
		{fmt.Errorf("%w: hidden", tlsvar.ErrUnsupported), reasonUnsupported},
		{fmt.Errorf("%w: more than 4096 files mapped at offset 0", tlsvar.ErrLimit), reasonResolveLimit},
		{fmt.Errorf("%w: %w, and some mapped files were refused", tlsvar.ErrLimit, tlsvar.ErrNotFound), reasonResolveLimit},
		{fmt.Errorf("%w: %w: total", tlsvar.ErrTransient, tlsvar.ErrLimit), reasonResolveLimit},
		{errors.New("open: permission denied"), reasonResolve},
	} {
		if got := resolveReason(tc.err); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}
