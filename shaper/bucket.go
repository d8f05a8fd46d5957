package shaper

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// task is a message on its way through the bucket, with the bookkeeping of
// its attempts.
type task struct {
	msg *Message
	// queued is when the task last entered the bucket: on admission, or when
	// its retry became due. Queue wait and the max_queue_time deadline count
	// from it.
	queued time.Time
	// first is the time of the first attempt; retry.max_elapsed counts from it.
	first time.Time
	// attempts made so far.
	attempts int
	// due is when a task in the retry heap may be sent again.
	due time.Time
	// err is the error of the last attempt.
	err error
	// inFIFO is whether the task is queued in its lane's FIFO;
	// laneIndex and dueIndex are its places in its lane's retry heap and
	// in the bucket's index of retries (-1: not there).
	inFIFO              bool
	laneIndex, dueIndex int
	// answered is whether the sink has answered the task's last request,
	// which the lane counts until the task is settled or sent back.
	answered bool
	// keySlot is whether the task holds its key's slot (rate.per_key) for
	// the departure it waits for: taken before the pipeline's own slot, so
	// that a key whose shared slot another replica took costs the
	// pipeline none.
	keySlot bool
	// destSlot is the same for its destination's own slot (rate.adaptive).
	destSlot bool
	// lane is the lane of the message's key, which holds it until it is
	// settled; dest is the destination of its request, whose gate holds it
	// back while that destination pushes back.
	lane *lane
	dest *destination
}

// bucket holds messages between the source and the sink, in lanes: one
// per key (one in all without key.from), each with its new messages in
// source order and its messages waiting for a retry. Lanes whose message is
// ready take turns (round robin); a lane under rate.per_key is ready only
// when its own slot has come. Everything held counts against the capacity,
// in flight included, so memory is bounded by the capacity whatever the
// backlog in the broker; when the bucket is full the source is not asked for
// more, and the broker keeps the rest. A lane holds at most perKey
// messages: admit pauses the source of a full key's further messages where
// it can (Pausable), or hands them back, so that one key's flood leaves
// room for the others.
//
// One goroutine takes (the scheduler) and one adds (the fetcher); settling
// may happen anywhere. bucket is safe for concurrent use.
type bucket struct {
	mu       sync.Mutex
	capacity int
	held     int // queued + waiting for retry + in flight
	queued   int // queued + waiting for retry
	wantRoom int // the room the fetcher waits for (WaitRoom)
	opt      laneOptions

	lanes    map[string]*lane
	ring     ring  // lanes that may have a message ready, taking turns
	timed    timed // lanes ready at a known time, or to be forgotten then
	overflow int64 // messages put in the "" lane because maxKeys lanes existed

	// dests are the destinations of the tasks held, and those whose gate
	// still holds back; throttledGone counts the attempts throttled by the
	// gates of destinations forgotten, for shaper_throttled_total.
	dests         map[string]*destination
	forgetAt      int // how many destinations make destinationLocked forget the idle ones
	throttledGone int64

	// arrivals are the tasks admitted, in order, from arrHead on; inFIFO
	// counts those still queued in a lane's FIFO (the others are skipped),
	// and retrying indexes the tasks waiting for a retry by due time. They
	// let expired find the tasks past their deadline in any lane.
	arrivals []*task
	arrHead  int
	inFIFO   int
	retrying dueHeap

	// ready and room carry one pending wake-up each (size one, so a signal
	// sent while nobody waits is kept and repeated signals coalesce).
	ready chan struct{} // to the scheduler: a task was added or became due
	room  chan struct{} // to the fetcher: there is room for wantRoom
	// queuedMore tells whoever expires tasks on time that a task was
	// queued, whose deadline may be the next.
	queuedMore chan struct{}
}

// laneOptions shape a bucket's lanes.
type laneOptions struct {
	// perKey is the most messages one lane holds (0: no bound but the
	// capacity); maxKeys the most lanes (0: no bound).
	perKey, maxKeys int
	// ordered lets one message of a lane out at a time (key.ordered), and
	// inFlight bounds a lane's messages in flight (0: no bound; with
	// key.from: host, sink.http.max_in_flight_per_host), so that a slow
	// key holds no more of the pipeline's max_in_flight than that.
	ordered  bool
	inFlight int
	// limiter makes a key's own limiter (rate.per_key; nil: none), and
	// idle is how long after its last slot such a limiter is as new.
	limiter func(key string, now time.Time) Limiter
	idle    time.Duration
	// newDest makes a destination at now (nil: plainDestination), and
	// dest names the destination of a message whose lane key is key (nil:
	// one destination, "").
	newDest func(name string, now time.Time) *destination
	dest    func(m *Message, key string) string
}

// holdsBack reports whether a lane's messages in flight can keep its next
// one from being ready, so that settling one must put the lane back in turn.
func (o laneOptions) holdsBack() bool { return o.ordered || o.inFlight > 0 }

// newBucket returns an empty bucket holding at most capacity messages,
// with lanes shaped by o.
func newBucket(capacity int, o laneOptions) *bucket {
	if o.newDest == nil {
		o.newDest = plainDestination
	}
	return &bucket{
		capacity:   max(capacity, 1),
		opt:        o,
		lanes:      map[string]*lane{},
		dests:      map[string]*destination{},
		ready:      make(chan struct{}, 1),
		room:       make(chan struct{}, 1),
		queuedMore: make(chan struct{}, 1),
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// SetCapacity changes the bound. Lowering it evicts nothing: admission stops
// until enough messages have left.
func (b *bucket) SetCapacity(capacity int) {
	b.mu.Lock()
	b.capacity = max(capacity, 1)
	b.mu.Unlock()
	signal(b.room)
}

// Capacity returns the bound in force.
func (b *bucket) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity
}

// WaitRoom blocks until there is room for batch messages (or for as many
// as the capacity, if fewer), and returns how much, or returns 0 when ctx
// ends. Releases wake it only once that room is there, not once per
// message.
func (b *bucket) WaitRoom(ctx context.Context, batch int) int {
	for {
		b.mu.Lock()
		want := min(max(batch, 1), b.capacity)
		n := b.capacity - b.held
		if n < want {
			b.wantRoom = want
		}
		b.mu.Unlock()
		if n >= want {
			return n
		}
		select {
		case <-b.room:
		case <-ctx.Done():
			return 0
		}
	}
}

// Held returns how many messages the bucket holds, in flight included.
func (b *bucket) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Queued returns how many messages wait for a departure (new or retrying).
func (b *bucket) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}

// handBack is a message admit did not take, because its key's lane was
// full; backlog is roughly how many of its key are ahead of it (held, and
// handed back before it), for the caller to choose when it comes again.
type handBack struct {
	msg     *Message
	backlog int
}

// admit adds newly fetched messages at the back of their key's lane (key
// nil: one lane). A message whose lane holds perKey already is admitted all
// the same if its source can pause the place it came from (Pausable), which
// admit does; otherwise it is returned, not admitted, for the caller to
// hand back to the source. It admits the others even past the capacity:
// they were fetched within the room given, and a message fetched is never
// thrown away. Pause is called under the bucket's lock: it must not block.
func (b *bucket) admit(now time.Time, msgs []*Message, key func(*Message) string) (full []handBack) {
	if len(msgs) == 0 {
		return nil
	}
	keys, dests := make([]string, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		if key != nil {
			keys[i] = key(m)
		}
		if b.opt.dest != nil {
			dests[i] = b.opt.dest(m, keys[i])
		}
	}
	b.mu.Lock()
	wasEmpty := b.inFIFO == 0
	for i, m := range msgs {
		l := b.laneLocked(keys[i], now)
		if b.opt.perKey > 0 && l.held >= b.opt.perKey {
			p, ok := m.Receipt.(Pausable)
			if !ok {
				l.handedBack++
				full = append(full, handBack{msg: m, backlog: l.held + l.handedBack})
				continue
			}
			l.resumes = append(l.resumes, p.Pause())
		} else if l.handedBack > 0 {
			l.handedBack--
		}
		t := &task{msg: m, queued: now, lane: l, dest: b.destinationLocked(dests[i], now), inFIFO: true, laneIndex: -1, dueIndex: -1}
		l.fifo = append(l.fifo, t)
		b.arrivals = append(b.arrivals, t)
		b.inFIFO++
		l.held++
		b.held++
		b.queued++
		b.touchLocked(l)
	}
	b.mu.Unlock()
	signal(b.ready)
	if wasEmpty {
		signal(b.queuedMore) // a later arrival's deadline is never the next
	}
	return full
}

// laneLocked returns the lane of key k, made if need be; past maxKeys
// lanes a new key goes to the "" lane, and is counted. It requires that
// b.mu is held.
func (b *bucket) laneLocked(k string, now time.Time) *lane {
	if l, ok := b.lanes[k]; ok {
		return l
	}
	if b.opt.maxKeys > 0 && len(b.lanes) >= b.opt.maxKeys && k != "" {
		b.overflow++
		return b.laneLocked("", now)
	}
	l := &lane{key: k, index: -1}
	if b.opt.limiter != nil {
		l.lim = b.opt.limiter(k, now)
		l.slot = l.lim.Next(now)
	}
	b.lanes[k] = l
	return l
}

// touchLocked puts l in the ring, out of the timed heap, for take to look
// at: something changed that may make its message ready. It requires that
// b.mu is held.
func (b *bucket) touchLocked(l *lane) {
	b.timed.remove(l)
	b.ring.add(l)
}

// retry puts a task that was in flight back into its lane, to be sent again
// once due.
func (b *bucket) retry(t *task, due time.Time) {
	b.mu.Lock()
	if t.answered {
		t.answered = false
		t.lane.answered--
	}
	t.due = due
	heap.Push(&t.lane.retries, t)
	heap.Push(&b.retrying, t)
	b.queued++
	b.touchLocked(t.lane)
	b.mu.Unlock()
	signal(b.ready)
	signal(b.queuedMore)
}

// take removes and returns the next task to send at now: the ready message
// of the lane whose turn it is; lanes with a ready message take turns
// (round robin). When none is ready it returns nil and the time the next
// lane's message becomes ready (a retry falls due, a per-key slot comes),
// or the zero time if none will by itself. Each call costs O(log lanes),
// amortised; one that finds maxParked lanes in the ring not ready files
// them away and returns nil and now, so that the lock is not held for a
// whole ring of them.
func (b *bucket) take(now time.Time) (*task, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for off := b.timed.offset(now); ; {
		l := b.timed.popDue(off)
		if l == nil {
			break
		}
		b.ring.add(l)
	}
	for parked := 0; b.ring.cursor != nil; parked++ {
		if parked == maxParked {
			return nil, now // more to look at: the caller asks again at once, having let others in
		}
		l := b.ring.cursor
		at, ok, probing := l.ready(now, b.opt.ordered, b.opt.inFlight)
		if ok && !at.After(now) {
			t := l.take(now, b.opt.ordered)
			b.takenLocked(t)
			b.ring.cursor = l.next // the turn passes on
			return t, time.Time{}
		}
		b.ring.remove(l)
		if probing != nil && l.parkedOn == nil {
			l.parkedOn = probing
			probing.parked = append(probing.parked, l)
		}
		b.parkLocked(l, now, at, ok)
	}
	if b.timed.len() > 0 {
		return nil, b.timed.first()
	}
	return nil, time.Time{}
}

// takenLocked takes t, just taken from its lane, out of the bucket's
// indexes of what is queued. The index of arrivals drops what was taken
// as it goes, so that it never holds much more than what is queued,
// whether or not an expiry pass runs (one may not for max_queue_time while
// the bucket never runs empty). It requires that b.mu is held.
func (b *bucket) takenLocked(t *task) {
	b.queued--
	if t.inFIFO {
		t.inFIFO = false
		b.inFIFO--
		b.compactArrivalsLocked()
	} else {
		heap.Remove(&b.retrying, t.dueIndex)
	}
}

// maxParked bounds how many lanes one take files away.
const maxParked = 256

// parkLocked files a lane out of the ring at now (zero: not known): in the
// timed heap when its next message is ready at at (ok), nowhere while its
// one message is in flight, and when it holds nothing, forgotten, or kept
// in the timed heap until its limiter is as new. It requires that b.mu is
// held.
func (b *bucket) parkLocked(l *lane, now, at time.Time, ok bool) {
	idle := l.lastSlot.Add(b.opt.idle)
	switch {
	case ok:
		b.timed.set(l, at)
	case l.held > 0:
	case l.lim != nil && (now.IsZero() || idle.After(now)):
		b.timed.set(l, idle)
	default:
		b.timed.remove(l)
		delete(b.lanes, l.key)
	}
}

// spend takes the slot of t's lane under rate.per_key, at now, as t
// departs, and reports whether it got it. A local limiter always gives it:
// take returned t only once the slot had come. A shared one (Redis) may
// find another replica took it; its Next then says when the next comes.
// The limiter is asked outside the bucket's lock, since a shared one makes
// a Redis call.
func (b *bucket) spend(t *task, now time.Time) bool {
	l := t.lane
	if l.lim == nil {
		return true
	}
	ok := l.lim.Allow(now)
	next := l.lim.Next(now)
	b.mu.Lock()
	l.slot = next
	if ok {
		l.lastSlot = now
	}
	b.mu.Unlock()
	return ok
}

// putBack returns a task the scheduler took but did not send to the head
// of its lane, as it was: it keeps its place in its key's order and its
// time in the bucket.
func (b *bucket) putBack(t *task) {
	b.retry(t, t.queued)
}

// drain removes and returns every queued task, for nacking at shutdown.
func (b *bucket) drain() []*task {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*task
	for _, l := range b.lanes {
		out = append(out, l.fifo[l.head:]...)
		out = append(out, l.retries...)
		l.fifo, l.head, l.retries = nil, 0, nil
		b.ring.remove(l)
		b.timed.remove(l)
	}
	for _, t := range out {
		t.inFIFO, t.laneIndex, t.dueIndex = false, -1, -1
	}
	b.queued, b.inFIFO = 0, 0
	b.arrivals, b.arrHead, b.retrying = nil, 0, nil
	return out
}

// release marks t as settled, making room for another. The sources paused
// for t's key go on once its lane has room; an ordered key's next message
// may go; a lane that holds nothing is forgotten (under rate.per_key, once
// its limiter is as new).
func (b *bucket) release(t *task) {
	var resumes []func()
	b.mu.Lock()
	b.held--
	t.dest.held-- // an idle destination is forgotten later, by destinationLocked or adaptDestinations
	l := t.lane
	l.held--
	if t.answered {
		l.answered--
	}
	if len(l.resumes) > 0 && l.held < b.opt.perKey {
		resumes, l.resumes = l.resumes, nil
	}
	if l.held == 0 {
		b.ring.remove(l)
		b.parkLocked(l, time.Time{}, time.Time{}, false)
	} else if b.opt.holdsBack() {
		b.touchLocked(l)
	}
	roomFor := b.capacity-b.held >= b.wantRoom
	b.mu.Unlock()
	for _, resume := range resumes {
		resume()
	}
	if roomFor {
		signal(b.room)
	}
	if b.opt.holdsBack() {
		signal(b.ready) // the key's next message may go now
	}
}

// answered tells the bucket that the sink has answered t's request: under
// a bound of messages in flight per lane, the lane's next may go while t is
// being settled.
func (b *bucket) answered(t *task) {
	if b.opt.inFlight == 0 {
		return
	}
	b.mu.Lock()
	t.answered = true
	t.lane.answered++
	b.touchLocked(t.lane)
	b.mu.Unlock()
	signal(b.ready)
}

// keys returns how many lanes exist, and how many messages went to the ""
// lane because max_keys lanes existed.
func (b *bucket) keys() (active int, overflow int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lanes), b.overflow
}

// KeyStatus is one lane, as GET /v1/pipelines/{name}/keys shows it.
type KeyStatus struct {
	Key string `json:"key"`
	// Depth is every message the key holds (queued, retrying, in flight).
	Depth int `json:"depth"`
	// OldestWait is how long its oldest queued message has waited, in
	// seconds (0 when none is queued).
	OldestWait float64 `json:"oldest_wait_seconds"`
	// Limit is the key's own limit in force (rate.per_key, or for a
	// destination's lane its rate.adaptive limit), if any.
	Limit float64 `json:"limit,omitempty"`
}

// top returns the n deepest lanes, deepest first, at now.
func (b *bucket) top(n int, now time.Time) []KeyStatus {
	b.mu.Lock()
	out := make([]KeyStatus, 0, len(b.lanes))
	for _, l := range b.lanes {
		if l.held == 0 {
			continue // only remembered for its per-key limit
		}
		ks := KeyStatus{Key: l.key, Depth: l.held}
		if l.queued() > 0 {
			ks.OldestWait = now.Sub(l.fifo[l.head].queued).Seconds()
		}
		if l.lim != nil {
			ks.Limit = l.lim.Limit(now)
		}
		if d := b.dests[l.key]; d != nil && d.lim != nil && (ks.Limit == 0 || d.lim.Limit(now) < ks.Limit) {
			ks.Limit = d.lim.Limit(now) // a lane per destination: its adaptive limit
		}
		out = append(out, ks)
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b KeyStatus) int { return cmp.Or(b.Depth-a.Depth, strings.Compare(a.Key, b.Key)) })
	return out[:min(n, len(out))]
}
