package shaper

import (
	"container/heap"
	"time"
)

// lane is the part of the bucket one key holds: its new messages in
// source order, its messages waiting for a retry, how many it holds in all
// (queued, retrying, in flight), and its own limiter under rate.per_key.
// A lane is made when its key's first message is admitted and forgotten
// once it holds nothing and its limiter is as a new one would be.
//
// A lane is in at most one of two places: the bucket's ring, of lanes that
// may have a message ready (the scheduler looks at them in turn), or its
// timed heap, of lanes whose next message is ready only at a known time (a
// retry's due time, the lane's next per-key slot) or which wait to be
// forgotten. A lane whose only message is in flight (an ordered key) is in
// neither; settling the message puts it back in the ring.
type lane struct {
	key  string
	fifo []*task
	head int // fifo[head:] are queued
	// retries are the lane's messages waiting for a retry, by due time.
	retries retryHeap
	held    int
	// lim is the lane's own limit (nil without rate.per_key); lastSlot is
	// the time of the last slot taken from it.
	lim      Limiter
	lastSlot time.Time
	// resumes let the sources paused for this key go on, once the lane has
	// room again (see Pausable).
	resumes []func()
	// handedBack counts the key's messages handed back and not yet seen
	// again, roughly: it sets how long the next one handed back stays away.
	handedBack int

	// prev and next link the lane into the ring; inRing says it is there.
	prev, next *lane
	inRing     bool
	// at is the lane's time in the timed heap, and index its place there
	// (-1: not in it).
	at    time.Time
	index int
}

func (l *lane) queued() int { return len(l.fifo) - l.head }

// pop removes and returns the lane's oldest queued task.
func (l *lane) pop() *task {
	t := l.fifo[l.head]
	l.fifo[l.head] = nil
	l.head++
	if l.head == len(l.fifo) || l.head > 1024 && l.head*2 > len(l.fifo) {
		l.fifo = append(l.fifo[:0], l.fifo[l.head:]...)
		l.head = 0
	}
	return t
}

// ready returns when the lane's next message may depart, at now: a retry
// that is due first (it is older than anything queued), else the oldest
// queued message, else the earliest retry; no sooner than the lane's next
// per-key slot. An ordered lane has at most one message out of its FIFO
// (in flight or waiting for a retry): while it is in flight, nothing of the
// lane is ready. ok is false when the lane has nothing to send.
func (l *lane) ready(now time.Time, ordered bool) (at time.Time, ok bool) {
	out := l.held - l.queued() - len(l.retries) // in flight
	switch {
	case ordered && out > 0:
		return time.Time{}, false
	case len(l.retries) > 0 && (!l.retries[0].due.After(now) || l.queued() == 0 || ordered):
		at = l.retries[0].due
	case l.queued() > 0:
		at = now
	default:
		return time.Time{}, false
	}
	if l.lim != nil {
		at = later(at, l.lim.Next(now))
	}
	return at, true
}

// take removes and returns the message that ready named.
func (l *lane) take(now time.Time, ordered bool) *task {
	if len(l.retries) > 0 && (!l.retries[0].due.After(now) || l.queued() == 0 || ordered) {
		t := heap.Pop(&l.retries).(*task)
		t.queued = t.due
		return t
	}
	return l.pop()
}

// ring is the circle of lanes that take turns; cursor is the lane whose
// turn is next. Insertion, removal and moving the turn on are O(1).
type ring struct {
	cursor *lane
	n      int
}

// add puts l last in the current round: just before the cursor.
func (r *ring) add(l *lane) {
	if l.inRing {
		return
	}
	l.inRing = true
	r.n++
	if r.cursor == nil {
		l.prev, l.next, r.cursor = l, l, l
		return
	}
	l.next, l.prev = r.cursor, r.cursor.prev
	l.prev.next, l.next.prev = l, l
}

// remove takes l out of the ring; if it was the cursor's, the turn passes
// to the next lane.
func (r *ring) remove(l *lane) {
	if !l.inRing {
		return
	}
	l.inRing = false
	r.n--
	if r.cursor == l {
		r.cursor = l.next
		if r.cursor == l {
			r.cursor = nil
		}
	}
	l.prev.next, l.next.prev = l.next, l.prev
	l.prev, l.next = nil, nil
}

// timed orders lanes by their time at.
type timed []*lane

func (h timed) Len() int           { return len(h) }
func (h timed) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timed) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timed) Push(x any) {
	l := x.(*lane)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *timed) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}

// set puts l in the heap at at, or moves it there.
func (h *timed) set(l *lane, at time.Time) {
	l.at = at
	if l.index >= 0 {
		heap.Fix(h, l.index)
		return
	}
	heap.Push(h, l)
}

// remove takes l out of the heap, if it is there.
func (h *timed) remove(l *lane) {
	if l.index >= 0 {
		heap.Remove(h, l.index)
	}
}

// retryHeap orders tasks waiting for a retry by due time.
type retryHeap []*task

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(*task)) }
func (h *retryHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
