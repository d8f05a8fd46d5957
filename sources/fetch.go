package sources

import (
	"context"
	"fmt"
	"time"
)

// checkFetch returns why a Fetch of max messages cannot start: an error
// naming broker when max < 1, or ctx.Err() when ctx has ended.
func checkFetch(ctx context.Context, broker string, max int) error {
	if max < 1 {
		return fmt.Errorf("%s: fetch %d messages: must be >= 1", broker, max)
	}
	return ctx.Err()
}

// fetchTurn lets the concurrent Fetch calls of one source take turns: it
// holds the token of the one Fetch running (a channel of size 1). Make it
// with newFetchTurn.
type fetchTurn chan struct{}

func newFetchTurn() fetchTurn { return make(fetchTurn, 1) }

// start checks a Fetch of max messages (checkFetch) and waits for its turn,
// or returns ctx.Err() if ctx ends first. Once start returns nil, the Fetch
// calls done when it returns.
func (f fetchTurn) start(ctx context.Context, broker string, max int) error {
	if err := checkFetch(ctx, broker, max); err != nil {
		return err
	}
	select {
	case f <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// done ends the turn that start began.
func (f fetchTurn) done() { <-f }

// handOver sends v on out, and reports whether it did: not when ctx ends
// first. While paused reports true it waits, without sending, for the
// change it gives; a pause that comes while it waits stops the handover.
func handOver[T any](ctx context.Context, out chan<- T, v T, paused func() (bool, <-chan struct{})) bool {
	for {
		p, changed := paused()
		ch := out
		if p {
			ch = nil // never ready: wait for changed or ctx
		}
		select {
		case ch <- v:
			return true
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// sleepUnless waits d, or until ctx ends (ctx.Err()) or done is closed
// (errClosed).
func sleepUnless(ctx context.Context, done <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return errClosed
	}
}
