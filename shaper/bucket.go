package shaper

import (
	"container/heap"
	"context"
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
}

// bucket holds messages between the source and the sink: a FIFO of new
// messages and a heap of messages waiting for a retry, bounded together
// with the messages in flight. A message is held from admission until its
// outcome is settled, so memory is bounded by the capacity whatever the
// backlog in the broker; when the bucket is full the source is not asked for
// more, and the broker keeps the rest.
//
// One goroutine takes (the scheduler) and one adds (the fetcher); settling
// may happen anywhere. bucket is safe for concurrent use.
type bucket struct {
	mu       sync.Mutex
	capacity int
	held     int // queued + waiting for retry + in flight
	fifo     []*task
	head     int // fifo[head:] are queued; the slice is compacted as it drains
	retries  retryHeap

	// ready and room carry one pending wake-up each (size one, so a signal
	// sent while nobody waits is kept and repeated signals coalesce).
	ready chan struct{} // to the scheduler: a task was added or became due
	room  chan struct{} // to the fetcher: a held task was released
}

// newBucket returns an empty bucket holding at most capacity messages.
func newBucket(capacity int) *bucket {
	return &bucket{
		capacity: max(capacity, 1),
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
	return len(b.fifo) - b.head + len(b.retries)
}

// admit adds newly fetched messages at the back of the FIFO. It admits them
// even past the capacity: they were fetched within the room given, and a
// message fetched is never thrown away.
func (b *bucket) admit(now time.Time, msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	b.mu.Lock()
	for _, m := range msgs {
		b.fifo = append(b.fifo, &task{msg: m, queued: now})
	}
	b.held += len(msgs)
	b.mu.Unlock()
	signal(b.ready)
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
// (retries are older than anything in the FIFO), else the FIFO's head. When
// none is ready it returns nil and the time the next retry falls due, or the
// zero time if there is none.
func (b *bucket) take(now time.Time) (*task, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.retries) > 0 && !b.retries[0].due.After(now) {
		t := heap.Pop(&b.retries).(*task)
		t.queued = t.due
		return t, time.Time{}
	}
	if b.head < len(b.fifo) {
		t := b.fifo[b.head]
		b.fifo[b.head] = nil
		b.head++
		if b.head == len(b.fifo) || b.head > 1024 && b.head*2 > len(b.fifo) {
			b.fifo = append(b.fifo[:0], b.fifo[b.head:]...)
			b.head = 0
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
	out := append([]*task(nil), b.fifo[b.head:]...)
	out = append(out, b.retries...)
	b.fifo, b.head, b.retries = nil, 0, nil
	return out
}

// release marks a task as settled, making room for another.
func (b *bucket) release() {
	b.mu.Lock()
	b.held--
	b.mu.Unlock()
	signal(b.room)
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
