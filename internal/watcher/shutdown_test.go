// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestShutdownWithinDeadline: the poll goroutine held up (here in a
// subscriber; a read nothing interrupts holds it the same way) does not
// keep Shutdown past its context's deadline; the goroutine, once free,
// stops and closes the scanner.
func TestShutdownWithinDeadline(t *testing.T) {
	w, err := New(Settings{Logger: zap.NewNop()}, *fastConfig(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	unsubscribe := w.Subscribe(func(Round) {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
	})
	<-held
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a deadline already passed: Shutdown must not wait at all
	if err := w.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with the poll goroutine held: %v, want the context's error", err)
	}
	close(release)
	unsubscribe()
	select {
	case <-w.closed:
	case <-time.After(30 * time.Second): // a deadlock check
		t.Fatal("the poll goroutine, released, has not stopped and closed the scanner")
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}
