package main

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/shaper-dev/shaper/shaper"
)

// The baselines are what shaper is measured against, driven by the same
// pipeline through shaper.Limiter: Next tells the departure time, and the
// scheduler sends at that time after taking it with Allow. They live here only; the product
// does not use them.

// fixedWindow is the counter most hand-rolled limiters are: at most n
// requests per one-second window, the count reset at each window edge. A
// request over the count waits for the next edge. It keeps the average but
// sends each window's n at once, and lets up to 2n through in one second
// across an edge (n at the end of one window, n at the start of the next).
//
// Windows are [origin + k·1s, origin + (k+1)·1s).
type fixedWindow struct {
	mu     sync.Mutex
	origin time.Time
	n      int
	window int64 // index of the window counted
	count  int   // requests in that window
}

var _ shaper.Limiter = (*fixedWindow)(nil)

func newFixedWindow(limit float64, origin time.Time) *fixedWindow {
	return &fixedWindow{origin: origin, n: max(int(limit), 1)}
}

// Next tells the place a request at now would take: in the window of now
// or, when that one is full, in the first window after it with room.
func (f *fixedWindow) Next(now time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.place(now, false)
}

// Allow takes a place in the window of now if it has room.
func (f *fixedWindow) Allow(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.place(now, false).After(now) {
		return false
	}
	f.place(now, true)
	return true
}

// place finds the place of a request at now, and takes it when take is
// true. It requires that f.mu is held.
func (f *fixedWindow) place(now time.Time, take bool) time.Time {
	window, count := f.window, f.count
	if !take {
		defer func() { f.window, f.count = window, count }()
	}
	w := int64(now.Sub(f.origin) / time.Second)
	if now.Before(f.origin) {
		w = -1
	}
	if w > f.window {
		f.window, f.count = w, 0
	}
	if f.count >= f.n {
		f.window++
		f.count = 0
	}
	f.count++
	start := f.origin.Add(time.Duration(f.window) * time.Second)
	if start.After(now) {
		return start
	}
	return now
}

// setOrigin moves the window edges; it is for a limiter nobody has
// reserved from yet.
func (f *fixedWindow) setOrigin(origin time.Time) {
	f.mu.Lock()
	f.origin, f.window, f.count = origin, 0, 0
	f.mu.Unlock()
}

func (f *fixedWindow) SetRate(limit float64, _ int) {
	f.mu.Lock()
	f.n = max(int(limit), 1)
	f.mu.Unlock()
}

func (f *fixedWindow) Limit(time.Time) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return float64(f.n)
}

// xrate is golang.org/x/time/rate used the way its Wait is: reserve one
// token at now and go after the reservation's delay. Wait does exactly
// this with a timer; here the pipeline's scheduler does the waiting.
type xrate struct {
	l *rate.Limiter
}

var _ shaper.Limiter = xrate{}

func newXRate(limit float64, burst int) xrate {
	return xrate{l: rate.NewLimiter(rate.Limit(limit), burst)}
}

// Next reserves a token and cancels the reservation at once, which gives
// it back whole while nothing was reserved after it.
func (x xrate) Next(now time.Time) time.Time {
	r := x.l.ReserveN(now, 1)
	defer r.CancelAt(now)
	return now.Add(r.DelayFrom(now))
}

func (x xrate) Allow(now time.Time) bool { return x.l.AllowN(now, 1) }

func (x xrate) SetRate(limit float64, burst int) {
	now := time.Now()
	x.l.SetLimitAt(now, rate.Limit(limit))
	x.l.SetBurstAt(now, burst)
}

func (x xrate) Limit(time.Time) float64 { return float64(x.l.Limit()) }
