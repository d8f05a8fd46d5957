package sources

import "time"

// delayQueue holds values until they are due: a min-heap by due time, then
// by push order, so values due at the same time come out in the order they
// went in. It is the one mechanism by which a source brings back a nacked
// message after a delay when its broker cannot (Kafka); the pipeline's retry
// heap never sees a nack.
//
// delayQueue runs no goroutine and no timer: next says when the first value
// is due, and the caller waits for that itself. The zero value is an empty
// queue. A delayQueue is not safe for concurrent use: its owner guards it
// with its own mutex.
type delayQueue[T any] struct {
	items []delayed[T]
	seq   uint64 // orders equal due times
}

// delayed is one value waiting in a delayQueue.
type delayed[T any] struct {
	due time.Time
	seq uint64
	v   T
}

// Len returns how many values wait.
func (q *delayQueue[T]) Len() int { return len(q.items) }

// Push queues v until due.
func (q *delayQueue[T]) Push(due time.Time, v T) {
	q.seq++
	q.items = append(q.items, delayed[T]{due: due, seq: q.seq, v: v})
	q.up(len(q.items) - 1)
}

// Next returns when the first value is due, and false when none waits.
func (q *delayQueue[T]) Next() (time.Time, bool) {
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].due, true
}

// PopDue removes and returns the first value if it is due at now.
func (q *delayQueue[T]) PopDue(now time.Time) (T, bool) {
	var zero T
	if len(q.items) == 0 || q.items[0].due.After(now) {
		return zero, false
	}
	h := q.items
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = delayed[T]{} // keep no value alive
	q.items = h[:last]
	q.down(0)
	return top.v, true
}

// Keep drops the values for which keep returns false.
func (q *delayQueue[T]) Keep(keep func(T) bool) {
	kept := q.items[:0]
	for _, x := range q.items {
		if keep(x.v) {
			kept = append(kept, x)
		}
	}
	clear(q.items[len(kept):]) // keep no dropped value alive
	q.items = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// Clear drops every value and returns how many there were.
func (q *delayQueue[T]) Clear() int {
	n := len(q.items)
	q.items = nil
	return n
}

func (q *delayQueue[T]) less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if !a.due.Equal(b.due) {
		return a.due.Before(b.due)
	}
	return a.seq < b.seq
}

func (q *delayQueue[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			return
		}
		q.items[i], q.items[parent] = q.items[parent], q.items[i]
		i = parent
	}
}

func (q *delayQueue[T]) down(i int) {
	h := q.items
	for {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(h) && q.less(l, least) {
			least = l
		}
		if r < len(h) && q.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}
