package shaper

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func msgs(n int) []*Message {
	out := make([]*Message, n)
	for i := range out {
		out[i] = &Message{ID: fmt.Sprint(i)}
	}
	return out
}

func TestBucketIsFIFOWithDueRetriesFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(10, laneOptions{})
	b.admit(now, msgs(3), nil)
	first, _ := b.take(now)
	b.retry(first, now.Add(time.Second))

	got, _ := b.take(now)
	if got.msg.ID != "1" {
		t.Fatalf("take() = %s; want 1 (the retry is not due yet)", got.msg.ID)
	}
	got, _ = b.take(now.Add(time.Second))
	if got.msg.ID != "0" {
		t.Fatalf("take(+1s) = %s; want 0 (a due retry goes first)", got.msg.ID)
	}
	if !got.queued.Equal(now.Add(time.Second)) {
		t.Errorf("retry queued = %v; want its due time", got.queued)
	}
	got, _ = b.take(now.Add(time.Second))
	if got.msg.ID != "2" {
		t.Fatalf("take() = %s; want 2", got.msg.ID)
	}
	if got, due := b.take(now); got != nil || !due.IsZero() {
		t.Errorf("take() on empty = %v, %v; want nil, zero", got, due)
	}
}

func TestBucketTakeReportsWhenTheNextRetryIsDue(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(10, laneOptions{})
	b.admit(now, msgs(1), nil)
	tk, _ := b.take(now)
	b.retry(tk, now.Add(3*time.Second))
	if got, due := b.take(now); got != nil || !due.Equal(now.Add(3*time.Second)) {
		t.Errorf("take() = %v, %v; want nil, now+3s", got, due)
	}
}

func TestBucketHoldsEveryMessageUntilReleased(t *testing.T) {
	now := time.Now()
	b := newBucket(5, laneOptions{})
	b.admit(now, msgs(3), nil)
	if got := b.Held(); got != 3 {
		t.Fatalf("Held() = %d; want 3", got)
	}
	inFlight, _ := b.take(now) // in flight: still held
	if got := b.Held(); got != 3 {
		t.Fatalf("Held() with one in flight = %d; want 3", got)
	}
	b.release(inFlight)
	if got := b.Held(); got != 2 {
		t.Fatalf("Held() after release = %d; want 2", got)
	}
	b.SetCapacity(1)
	if got, c := b.Held(), b.Capacity(); got != 2 || c != 1 {
		t.Fatalf("Held(), Capacity() after shrinking below held = %d, %d; want 2, 1", got, c)
	}
}

// checkWaitRoom checks that the WaitRoom(batch) answering on done wakes
// within 10s with room for want.
func checkWaitRoom(t *testing.T, done <-chan int, batch, want int) {
	t.Helper()
	select {
	case n := <-done:
		if n != want {
			t.Errorf("WaitRoom(%d) = %d; want %d", batch, n, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("WaitRoom(%d) did not wake with room for %d", batch, want)
	}
}

func TestBucketWaitRoomWakesOnRelease(t *testing.T) {
	b := newBucket(1, laneOptions{})
	b.admit(time.Now(), msgs(1), nil)
	held, _ := b.take(time.Now())
	done := make(chan int)
	go func() { done <- b.WaitRoom(context.Background(), 1) }()
	b.release(held)
	checkWaitRoom(t, done, 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	b.admit(time.Now(), msgs(1), nil)
	cancel()
	if n := b.WaitRoom(ctx, 1); n != 0 {
		t.Errorf("WaitRoom(cancelled) = %d; want 0", n)
	}
}

func TestBucketDrainReturnsEveryQueuedTask(t *testing.T) {
	now := time.Now()
	b := newBucket(100, laneOptions{})
	b.admit(now, msgs(10), nil)
	for range 4 {
		tk, _ := b.take(now)
		b.retry(tk, now.Add(time.Hour))
	}
	if got := len(b.drain()); got != 10 {
		t.Errorf("drain() returned %d tasks; want 10", got)
	}
}

func TestEffectiveCapacityIsHeldToLimitTimesMaxQueueTime(t *testing.T) {
	tests := []struct {
		capacity int
		limit    float64
		wait     time.Duration
		want     int
	}{
		{1000, 50, 5 * time.Second, 250},
		{100, 50, 5 * time.Second, 100},
		{1000, 0.5, time.Second, 1},
		{1000, 25, 30 * time.Second, 750},
	}
	for _, tt := range tests {
		got := effectiveCapacity(BucketConfig{Capacity: tt.capacity, MaxQueueTime: tt.wait}, tt.limit)
		if got != tt.want {
			t.Errorf("effectiveCapacity(%d, %v/s, %v) = %d; want %d", tt.capacity, tt.limit, tt.wait, got, tt.want)
		}
	}
}

func TestBucketWaitRoomWaitsForABatchAndWakesOnceItIsThere(t *testing.T) {
	b := newBucket(8, laneOptions{})
	b.admit(time.Now(), msgs(8), nil)
	var held []*task
	for range 8 {
		h, _ := b.take(time.Now())
		held = append(held, h)
	}
	done := make(chan int)
	go func() { done <- b.WaitRoom(context.Background(), 3) }()
	b.release(held[0])
	b.release(held[1])
	select {
	case n := <-done:
		t.Fatalf("WaitRoom(3) returned %d with room for 2", n)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(held[2])
	checkWaitRoom(t, done, 3, 3)
	// A batch larger than the capacity waits for the whole capacity.
	go func() { done <- b.WaitRoom(context.Background(), 100) }()
	for _, h := range held[3:] {
		b.release(h)
	}
	if n := <-done; n != 8 {
		t.Errorf("WaitRoom(100) with capacity 8 = %d; want 8", n)
	}
}

// A bucket that never runs empty (a Kafka backlog) keeps no reference to
// what it handed out: its index of arrivals, which finds the messages past
// their deadline, holds at most about twice what is queued, whether or not
// an expiry pass has run. It held every message admitted within
// max_queue_time, payload included: 425 MiB of heap for 200 000 messages
// of 1 KiB at 20 000/s with max_queue_time 1m.
func TestBucketForgetsWhatItHandedOutWithoutAnExpiryPass(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const capacity = 100
	b := newBucket(capacity, laneOptions{})
	b.admit(now, msgs(capacity), nil)
	most := 0
	for i := range 50_000 {
		got, _ := b.take(now)
		if got == nil {
			t.Fatalf("take #%d = nil with %d queued", i, b.Queued())
		}
		b.release(got)
		b.admit(now, []*Message{{ID: fmt.Sprint("more", i)}}, nil)
		most = max(most, len(b.arrivals))
	}
	if limit := max(1024, 2*capacity) + 1; most > limit {
		t.Errorf("the index of arrivals reached %d tasks with %d queued; want at most %d", most, capacity, limit)
	}
}
