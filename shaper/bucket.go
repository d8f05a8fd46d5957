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
	// probe marks the attempt in flight as the circuit breaker's probe.
	probe bool
	// lane is the lane of the message's key, which holds it until it is
	// settled.
	lane *lane
}

// lane is the part of the bucket one key holds: its queued messages in
// source order, and how many it holds in all (queued, retrying, in
// flight). A lane is made when its key's first message is admitted and
// forgotten once it holds nothing.
type lane struct {
	key  string
	fifo []*task
	head int // fifo[head:] are queued
	held int
	// inRing is whether the lane is in the bucket's ring of lanes with a
	// message queued.
	inRing bool
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

// bucket holds messages between the source and the sink: one lane per key
// (one lane in all without key.from), each a FIFO of new messages, taken
// in turn, and one heap of messages waiting for a retry, bounded together
// with the messages in flight. A message is held from admission until its
// outcome is settled, so memory is bounded by the capacity whatever the
// backlog in the broker; when the bucket is full the source is not asked for
// more, and the broker keeps the rest. A lane holds at most perKey
// messages: admit hands back those of a full lane, for the source to
// redeliver later, so that one key's flood leaves room for the others.
//
// One goroutine takes (the scheduler) and one adds (the fetcher); settling
// may happen anywhere. bucket is safe for concurrent use.
type bucket struct {
	mu       sync.Mutex
	capacity int
	held     int // queued + waiting for retry + in flight
	queued   int // in every lane's FIFO
	retries  retryHeap

	perKey, maxKeys int
	lanes           map[string]*lane
	// ring holds the lanes with a message queued, in the order they are
	// taken; next is the ring position of the next lane's turn.
	ring     []*lane
	next     int
	overflow int64 // messages put in the "" lane because maxKeys lanes existed

	// ready and room carry one pending wake-up each (size one, so a signal
	// sent while nobody waits is kept and repeated signals coalesce).
	ready chan struct{} // to the scheduler: a task was added or became due
	room  chan struct{} // to the fetcher: a held task was released
}

// newBucket returns an empty bucket holding at most capacity messages, at
// most perKey of one key (0: no bound but the capacity), in at most maxKeys
// lanes (0: no bound).
func newBucket(capacity, perKey, maxKeys int) *bucket {
	return &bucket{
		capacity: max(capacity, 1),
		perKey:   perKey,
		maxKeys:  maxKeys,
		lanes:    map[string]*lane{},
		ready:    make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
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

// Room returns how many more messages may be admitted now.
func (b *bucket) Room() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.capacity-b.held, 0)
}

// WaitRoom blocks until there is room for at least one message, and returns
// how much, or returns 0 when ctx ends.
func (b *bucket) WaitRoom(ctx context.Context) int {
	for {
		if n := b.Room(); n > 0 {
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
	return b.queued + len(b.retries)
}

// admit adds newly fetched messages at the back of their key's lane (key
// nil: one lane), and returns those of a lane that holds perKey already,
// not admitted: the caller hands them back to the source. It admits the
// others even past the capacity: they were fetched within the room given,
// and a message fetched is never thrown away.
func (b *bucket) admit(now time.Time, msgs []*Message, key func(*Message) string) (full []*Message) {
	if len(msgs) == 0 {
		return nil
	}
	b.mu.Lock()
	for _, m := range msgs {
		k := ""
		if key != nil {
			k = key(m)
		}
		l := b.laneLocked(k)
		if b.perKey > 0 && l.held >= b.perKey {
			full = append(full, m)
			continue
		}
		l.fifo = append(l.fifo, &task{msg: m, queued: now, lane: l})
		l.held++
		b.held++
		b.queued++
		if !l.inRing {
			l.inRing = true
			b.ring = append(b.ring, l)
		}
	}
	b.mu.Unlock()
	signal(b.ready)
	return full
}

// laneLocked returns the lane of key k, made if need be; past maxKeys
// lanes a new key goes to the "" lane, and is counted. It requires that
// b.mu is held.
func (b *bucket) laneLocked(k string) *lane {
	if l, ok := b.lanes[k]; ok {
		return l
	}
	if b.maxKeys > 0 && len(b.lanes) >= b.maxKeys && k != "" {
		b.overflow++
		return b.laneLocked("")
	}
	l := &lane{key: k}
	b.lanes[k] = l
	return l
}

// retry puts a task that was in flight into the retry heap, due at due.
func (b *bucket) retry(t *task, due time.Time) {
	b.mu.Lock()
	t.due = due
	heap.Push(&b.retries, t)
	b.mu.Unlock()
	signal(b.ready)
}

// take removes and returns the next task to send at now: a retry that is due
// (retries are older than anything queued), else the oldest message of the
// lane whose turn it is; lanes take turns (round robin). When none is ready
// it returns nil and the time the next retry falls due, or the zero time if
// there is none.
func (b *bucket) take(now time.Time) (*task, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.retries) > 0 && !b.retries[0].due.After(now) {
		t := heap.Pop(&b.retries).(*task)
		t.queued = t.due
		return t, time.Time{}
	}
	if len(b.ring) > 0 {
		b.next %= len(b.ring)
		l := b.ring[b.next]
		t := l.pop()
		b.queued--
		if l.queued() == 0 {
			// Out of the ring; the next lane moves into this turn.
			l.inRing = false
			b.ring = slices.Delete(b.ring, b.next, b.next+1)
		} else {
			b.next++
		}
		return t, time.Time{}
	}
	if len(b.retries) > 0 {
		return nil, b.retries[0].due
	}
	return nil, time.Time{}
}

// drain removes and returns every queued task, for nacking at shutdown.
func (b *bucket) drain() []*task {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*task
	for _, l := range b.ring {
		out = append(out, l.fifo[l.head:]...)
		l.fifo, l.head, l.inRing = nil, 0, false
	}
	out = append(out, b.retries...)
	b.ring, b.retries, b.queued = nil, nil, 0
	return out
}

// release marks t as settled, making room for another; a lane that holds
// nothing more is forgotten.
func (b *bucket) release(t *task) {
	b.mu.Lock()
	b.held--
	if l := t.lane; l != nil {
		l.held--
		if l.held == 0 && !l.inRing {
			delete(b.lanes, l.key)
		}
	}
	b.mu.Unlock()
	signal(b.room)
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
}

// top returns the n deepest lanes, deepest first, at now.
func (b *bucket) top(n int, now time.Time) []KeyStatus {
	b.mu.Lock()
	out := make([]KeyStatus, 0, len(b.lanes))
	for _, l := range b.lanes {
		ks := KeyStatus{Key: l.key, Depth: l.held}
		if l.queued() > 0 {
			ks.OldestWait = now.Sub(l.fifo[l.head].queued).Seconds()
		}
		out = append(out, ks)
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b KeyStatus) int { return cmp.Or(b.Depth-a.Depth, strings.Compare(a.Key, b.Key)) })
	return out[:min(n, len(out))]
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
