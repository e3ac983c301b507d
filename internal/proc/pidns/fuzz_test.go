// SPDX-License-Identifier: Apache-2.0

//go:build linux

package pidns

import (
	"errors"
	"testing"
)

// FuzzParseNSpid: any /proc/PID/task/TID/status gives a positive TID or
// ErrNoNSTID.
func FuzzParseNSpid(f *testing.F) {
	f.Add([]byte("Name:\tjava\nTgid:\t100\nPid:\t101\nNSpid:\t101\t7\nNStgid:\t100\t1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseNSpid(b)
		switch {
		case err != nil && !errors.Is(err, ErrNoNSTID):
			t.Fatalf("error %v is not ErrNoNSTID", err)
		case err == nil && v <= 0:
			t.Fatalf("TID %d", v)
		}
	})
}
