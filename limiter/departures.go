package limiter

import (
	"math"
	"time"
)

// The windows in which Leaky mode never lets more than w·limit + 1 slots
// go: APIs count per second or per 100ms.
const (
	shortWindow = 100 * time.Millisecond
	longWindow  = time.Second
)

// maxWindowSlots bounds what a window is kept for: 2^14 departures, 128 KiB.
// Above 16 383/s Leaky mode keeps no second, which may then hold the slots
// of a catch-up (maxCatchUp's worth) more, 0.2%; above 163 830/s no 100ms
// either, which may then hold 2% more.
const maxWindowSlots = 1 << 14

// departures is what Leaky mode remembers of the slots it gave: their
// departure times, as many as the longer window may hold, in a ring that
// grows to that size as slots are taken (a limiter that gives few slots
// keeps few). From them it tells how soon the next departure may come
// without putting more than w·limit + 1 into any closed window of length w.
// The zero value remembers nothing and holds nothing back (Token mode).
type departures struct {
	// times is the ring; once it has grown to size, times[next] is the
	// oldest, and before that times[0] is.
	times []int64
	next  int
	size  int
	// most is how many departures each window (shortWindow, longWindow)
	// may hold, w·limit + 1, or 0 when it is not kept.
	most [2]int
	// until is the earliest time at which the next departure keeps every
	// window within its most, or 0 when none holds it back: worked out
	// once per departure, read by every slot asked for until the next.
	until int64
}

// windowLengths returns shortWindow and longWindow in nanoseconds.
func windowLengths() [2]int64 { return [2]int64{int64(shortWindow), int64(longWindow)} }

// reset forgets every departure and sizes the windows for slots interval
// nanoseconds apart.
func (w *departures) reset(interval float64) {
	w.size = 0
	for i, length := range windowLengths() {
		w.most[i] = 0
		if n := math.Floor(float64(length)/interval) + 1; n <= maxWindowSlots {
			w.most[i] = int(n)
			w.size = max(w.size, int(n))
		}
	}
	if cap(w.times) > w.size {
		w.times = nil
	}
	w.times, w.next, w.until = w.times[:0], 0, 0
}

// add remembers a departure at t, later than or as late as every other,
// and works out until: for each window, just past the end of the one that
// starts at the departure most-1 before this one.
func (w *departures) add(t int64) {
	switch {
	case w.size == 0:
		return
	case len(w.times) < w.size:
		w.times = append(w.times, t)
	default:
		w.times[w.next] = t
		w.next = (w.next + 1) % w.size
	}
	w.until = 0
	for i, length := range windowLengths() {
		if n := w.most[i]; n > 0 && n <= len(w.times) {
			first := w.times[(w.next-n+len(w.times))%len(w.times)]
			w.until = max(w.until, addSat(first, length+1))
		}
	}
}
