package shaper

import (
	"container/heap"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"
)

// This file holds what the bucket keeps per destination, and how it
// expires what it holds on time.
//
// A destination is where a message's request goes: the sink's canonical
// origin for it (Destinations), or "" for a sink that names none. Its gate
// holds the Retry-After pause and the circuit breaker of the requests it
// answers, so that one merchant's push-back holds back only the messages
// for that merchant. A lane's next message is ready only while its
// destination's gate is open.
//
// Lock order: bucket.mu, then a gate's mu. A gate never calls back into
// the bucket; whoever changes a gate asks the bucket to look at the lanes
// waiting for it again (wake).

// destination is one destination's state in the bucket: its gate; under
// rate.adaptive its own limiter and the adaptive rate that moves it (nil:
// none); how many tasks held are bound for it; and the lanes whose next
// message waits for the answer to its probe. held and parked are guarded
// by bucket.mu.
type destination struct {
	name     string
	gate     *gate
	lim      Limiter
	adaptive *adaptive
	held     int
	parked   []*lane
}

// idle reports whether d may be forgotten at now: it holds no task, its
// gate holds nothing back, and its limit is back at its ceiling.
func (d *destination) idle(now time.Time) bool {
	if d.held > 0 {
		return false
	}
	if _, why := d.gate.shut(now); why != holdNone {
		return false
	}
	return d.adaptive == nil || d.adaptive.atCeiling(d.lim.Limit(now))
}

// destinationLocked returns the destination named name, made at now if
// need be, and counts one more task bound for it. Making one forgets the
// idle others once they are as many again as after the last time, so that
// the destinations remembered stay about those that hold something. It
// requires that b.mu is held.
func (b *bucket) destinationLocked(name string, now time.Time) *destination {
	d, ok := b.dests[name]
	if !ok {
		if len(b.dests) >= b.forgetAt {
			for _, o := range b.dests {
				if o.idle(now) {
					b.forgetOneLocked(o)
				}
			}
			b.forgetAt = max(2*len(b.dests), 64)
		}
		d = b.opt.newDest(name, now)
		b.dests[name] = d
	}
	d.held++
	return d
}

// forgetOneLocked forgets d, keeping the count of its throttled attempts.
// It requires that b.mu is held.
func (b *bucket) forgetOneLocked(d *destination) {
	n, _ := d.gate.counts()
	b.throttledGone += n
	delete(b.dests, d.name)
}

// eachDestination calls f with every destination remembered, under the
// bucket's lock, and forgets those f reports idle. f must not call the
// bucket.
func (b *bucket) eachDestination(f func(d *destination) (idle bool)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.dests {
		if f(d) && d.held == 0 {
			b.forgetOneLocked(d)
		}
	}
}

// wake puts back in turn the lanes whose next message waits for d's probe:
// d's gate changed.
func (b *bucket) wake(d *destination) {
	b.mu.Lock()
	for _, l := range d.parked {
		l.parkedOn = nil
		if l.held > 0 {
			b.touchLocked(l)
		}
	}
	d.parked = nil
	b.mu.Unlock()
	signal(b.ready)
}

// destinationHold is why every destination known holds back at now: the
// pipeline's state when they all do (open when any breaker is open), else
// holdNone. With one destination, it is that destination's.
func (b *bucket) destinationHold(now time.Time) hold {
	b.mu.Lock()
	defer b.mu.Unlock()
	why := holdNone
	for _, d := range b.dests {
		_, w := d.gate.shut(now)
		switch {
		case w == holdNone:
			return holdNone
		case w == holdOpen || why == holdNone:
			why = w
		}
	}
	return why
}

// soleLimit returns the limit in force of the one destination remembered,
// when there is exactly one and it has a limiter of its own.
func (b *bucket) soleLimit(now time.Time) (float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dests) != 1 {
		return 0, false
	}
	for _, d := range b.dests {
		if d.lim != nil {
			return d.lim.Limit(now), true
		}
	}
	return 0, false
}

// gateCounts sums the destinations' gates: attempts throttled (also of
// destinations forgotten) and breakers open now.
func (b *bucket) gateCounts() (throttled int64, open int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	throttled = b.throttledGone
	for _, d := range b.dests {
		n, isOpen := d.gate.counts()
		throttled += n
		if isOpen {
			open++
		}
	}
	return throttled, open
}

// plainDestination makes the destinations of a bucket built without a
// maker (tests of the bucket alone): a gate that logs nothing and rings
// nothing, and no limiter.
func plainDestination(name string, _ time.Time) *destination {
	return &destination{name: name, gate: &gate{log: slog.New(slog.NewTextHandler(io.Discard, nil)), changed: func() {}, jitter: rand.Int64N}}
}

// expired takes out of their lanes and returns the queued tasks whose
// deadline has passed at now: maxWait after they entered the bucket, or
// after their retry fell due. It also returns the next deadline of a task
// still queued (zero: none). The cost is that of the tasks returned, and
// of skipping the arrivals taken since the last call.
func (b *bucket) expired(now time.Time, maxWait time.Duration) (out []*task, next time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.arrHead < len(b.arrivals) {
		t := b.arrivals[b.arrHead]
		if t.inFIFO {
			if t.queued.Add(maxWait).After(now) {
				next = t.queued.Add(maxWait)
				break
			}
			// Arrivals are in admission order, as each lane's FIFO is: the
			// first arrival still in a FIFO is at that FIFO's head.
			t.lane.pop()
			t.inFIFO = false
			b.inFIFO--
			out = append(out, t)
		}
		b.arrivals[b.arrHead] = nil
		b.arrHead++
	}
	b.compactArrivalsLocked()
	for len(b.retrying) > 0 {
		t := b.retrying[0]
		if dl := t.due.Add(maxWait); dl.After(now) {
			if next.IsZero() || dl.Before(next) {
				next = dl
			}
			break
		}
		heap.Remove(&t.lane.retries, t.laneIndex)
		heap.Pop(&b.retrying)
		t.queued = t.due
		out = append(out, t)
	}
	b.queued -= len(out)
	return out, next
}

// compactArrivalsLocked drops the arrivals taken from their FIFO once they
// outnumber those still there (and 1024), so that neither a message held
// long nor a bucket that never runs empty keeps everything admitted after
// it; each compaction copies what is still queued, at most half of what it
// looks at, so its cost per take is constant. It requires that b.mu is
// held.
func (b *bucket) compactArrivalsLocked() {
	n := len(b.arrivals) - b.arrHead
	if n < 1024 || n < 2*b.inFIFO {
		if b.arrHead == len(b.arrivals) {
			b.arrivals, b.arrHead = b.arrivals[:0], 0
		}
		return
	}
	kept := b.arrivals[:0]
	for _, t := range b.arrivals[b.arrHead:] {
		if t.inFIFO {
			kept = append(kept, t)
		}
	}
	clear(b.arrivals[len(kept):])
	b.arrivals, b.arrHead = kept, 0
}
