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
	// answered counts the lane's messages whose request the sink has
	// answered and that wait to be settled (acked, dead-lettered): they
	// are out of the lane but no longer in flight.
	answered int
	// lim is the lane's own limit (nil without rate.per_key); slot is when
	// its next slot comes, as lim said after the last Allow (only Allow
	// moves it), and lastSlot the time of the last slot taken.
	lim            Limiter
	slot, lastSlot time.Time
	// parkedOn is the destination whose probe the lane's next message
	// waits for (nil: none); its answer puts the lane back in turn.
	parkedOn *destination
	// resumes let the sources paused for this key go on, once the lane has
	// room again (see Pausable).
	resumes []func()
	// handedBack counts the key's messages handed back and not yet seen
	// again, roughly: it sets how long the next one handed back stays away.
	handedBack int

	// prev and next link the lane into the ring; inRing says it is there.
	prev, next *lane
	inRing     bool
	// index is the lane's place in the timed heap (-1: not in it).
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
// per-key slot, nor than its destination's gate opens. An ordered lane has
// at most one message out of its FIFO (in flight or waiting for a retry):
// while it is in flight, nothing of the lane is ready; nor is a lane with
// inFlight messages in flight (0: no bound). ok is false when the lane has
// nothing to send, or when its next message's destination waits for the
// answer to its probe: then probing is that destination.
func (l *lane) ready(now time.Time, ordered bool, inFlight int) (at time.Time, ok bool, probing *destination) {
	out := l.held - l.queued() - len(l.retries) // in flight or being settled
	if ordered && out > 0 || inFlight > 0 && out-l.answered >= inFlight {
		return time.Time{}, false, nil
	}
	t, fromRetries := l.peek(now, ordered)
	switch {
	case t == nil:
		return time.Time{}, false, nil
	case fromRetries:
		at = t.due
	default:
		at = now
	}
	if l.lim != nil {
		at = later(at, l.slot)
	}
	if d := t.dest; d.lim != nil {
		at = later(at, d.lim.Next(now))
	}
	until, why := t.dest.gate.shut(now)
	if why != holdNone && until.IsZero() {
		return time.Time{}, false, t.dest
	}
	return later(at, until), true, nil
}

// peek returns the message the lane would send next at now, and whether
// it waits for a retry; nil when the lane has nothing queued.
func (l *lane) peek(now time.Time, ordered bool) (t *task, fromRetries bool) {
	switch {
	case len(l.retries) > 0 && (!l.retries[0].due.After(now) || l.queued() == 0 || ordered):
		return l.retries[0], true
	case l.queued() > 0:
		return l.fifo[l.head], false
	}
	return nil, false
}

// take removes and returns the message that ready named.
func (l *lane) take(now time.Time, ordered bool) *task {
	if _, fromRetries := l.peek(now, ordered); fromRetries {
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

// timed is a 4-ary min-heap of lanes by the time each is filed at. Each
// entry carries its time, as nanoseconds since the first time filed (an
// int compares faster than a time.Time, and an offset from a time.Time
// keeps its monotonic reading), so that ordering reads only the heap's own
// slice; each lane carries its index, so that it can be moved or taken out
// in O(log n). It is written out rather than through container/heap, whose
// interface calls cost more than the rest of a scheduling decision.
type timed struct {
	epoch time.Time
	es    []timedEntry
}

type timedEntry struct {
	at int64 // nanoseconds after epoch
	l  *lane
}

func (h *timed) len() int { return len(h.es) }

// offset returns t in nanoseconds after the epoch, which the first time
// filed sets.
func (h *timed) offset(t time.Time) int64 {
	if h.epoch.IsZero() {
		h.epoch = t
	}
	return int64(t.Sub(h.epoch))
}

// popDue takes out and returns the earliest lane if its time has come by
// now (an offset), else nil.
func (h *timed) popDue(now int64) *lane {
	if len(h.es) == 0 || h.es[0].at > now {
		return nil
	}
	return h.pop()
}

// first returns the earliest time filed; the heap must not be empty.
func (h *timed) first() time.Time { return h.epoch.Add(time.Duration(h.es[0].at)) }

// set files l at at, or moves it there.
func (h *timed) set(l *lane, at time.Time) {
	off := h.offset(at)
	if i := l.index; i >= 0 {
		h.es[i].at = off
		if !h.up(i) {
			h.down(i)
		}
		return
	}
	l.index = len(h.es)
	h.es = append(h.es, timedEntry{at: off, l: l})
	h.up(l.index)
}

// pop takes out and returns the lane filed earliest.
func (h *timed) pop() *lane {
	l := h.es[0].l
	h.remove(l)
	return l
}

// remove takes l out of the heap, if it is there.
func (h *timed) remove(l *lane) {
	i := l.index
	if i < 0 {
		return
	}
	last := len(h.es) - 1
	h.swap(i, last)
	h.es[last] = timedEntry{}
	h.es = h.es[:last]
	l.index = -1
	if i < last && !h.up(i) {
		h.down(i)
	}
}

func (h *timed) swap(i, j int) {
	es := h.es
	es[i], es[j] = es[j], es[i]
	es[i].l.index, es[j].l.index = i, j
}

// up moves entry i towards the root while it is earlier than its parent,
// and reports whether it moved.
func (h *timed) up(i int) bool {
	start := i
	for i > 0 {
		parent := (i - 1) / arity
		if h.es[i].at >= h.es[parent].at {
			break
		}
		h.swap(i, parent)
		i = parent
	}
	return i != start
}

// down moves entry i towards the leaves while a child is earlier.
func (h *timed) down(i int) {
	n := len(h.es)
	for {
		least := i
		first := arity*i + 1
		for c := first; c < min(first+arity, n); c++ {
			if h.es[c].at < h.es[least].at {
				least = c
			}
		}
		if least == i {
			return
		}
		h.swap(i, least)
		i = least
	}
}

// arity is the timed heap's children per entry: four halve its depth,
// and so the cache misses of a sift through 10 000 lanes, for a few more
// comparisons of entries that sit side by side.
const arity = 4

// dueOrder is a min-heap of tasks by due time, for container/heap; each
// task keeps its place in it in the field place names, so that one task
// can be taken out from anywhere. A task is in two such heaps while it
// waits for a retry: its lane's (retryHeap) and the bucket's (dueHeap).
type dueOrder[P place] []*task

// place names a field of task that holds its index in one dueOrder.
type place interface{ of(t *task) *int }

type inLane struct{}
type inBucket struct{}

func (inLane) of(t *task) *int   { return &t.laneIndex }
func (inBucket) of(t *task) *int { return &t.dueIndex }

type (
	// retryHeap is a lane's tasks waiting for a retry.
	retryHeap = dueOrder[inLane]
	// dueHeap is the bucket's index of every task waiting for a retry.
	dueHeap = dueOrder[inBucket]
)

func (h dueOrder[P]) Len() int           { return len(h) }
func (h dueOrder[P]) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueOrder[P]) Swap(i, j int) {
	var p P
	h[i], h[j] = h[j], h[i]
	*p.of(h[i]), *p.of(h[j]) = i, j
}
func (h *dueOrder[P]) Push(x any) {
	var p P
	t := x.(*task)
	*p.of(t) = len(*h)
	*h = append(*h, t)
}
func (h *dueOrder[P]) Pop() any {
	var p P
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	*p.of(t) = -1
	return t
}
