// Package limiter gives each request of a pipeline its departure time.
//
// The pipeline's scheduler asks a Limiter when the next slot comes (Next)
// before every attempt it sends to a sink, retries included, waits until
// then, and takes the slot (Allow) only when it sends: a slot is spent only
// by a request that goes. Reserve takes a slot at once, for callers that
// always send. A Limiter spaces slots 1/limit apart (leaky mode) or lets up
// to burst go at once after idle time and then holds the average at limit
// (token mode). A rate change takes effect from the time it is made,
// whatever was reserved under the old rate.
//
// Both modes are one formula, the generic cell rate algorithm (GCRA) in its
// virtual-scheduling form. The whole state is the theoretical arrival time
// (TAT): the time at which the next slot would fall if the limiter had never
// allowed a burst. Each slot costs one emission interval T = 1/limit, and a
// slot may go up to a tolerance tau = (burst-1)·T before its theoretical time.
// Reserve(now) therefore hands out max(now, TAT-tau) and moves TAT to
// max(TAT, now)+T. Leaky mode is the case tau = 0: slots are exactly T apart
// and idle time earns no burst. Everything is computed from timestamps when
// Reserve is called, so no ticker or goroutine runs and an idle limiter uses
// no CPU.
//
// A caller woken a little late for its slot keeps the schedule, so the rate
// does not lose its wake-ups; the next slot then comes sooner. Leaky mode
// therefore also remembers its departures of the last second, and gives no
// slot that would put more than limit/10 + 1 of them in any 100ms or more
// than limit + 1 in any second: what the schedule forgives never shows as a
// burst to an API that counts per 100ms or per second.
//
// Shared applies the same formula to one limit for several replicas: the
// TAT, the limit and the burst live in one Redis key moved by a Lua script
// on the server's clock, each replica leases short runs of slots from it to
// keep Redis off the hot path, and a replica that cannot reach Redis falls
// back to a local Limiter at its own fallback limit, never unlimited. It
// runs one goroutine that schedules its Redis calls (each call on a
// goroutine of its own, at most two at once), which Close stops.
//
// SharedKeys does the same for each key's own limit (rate.per_key, or a
// destination's adaptive limit), one Redis hash per key: a key is taken
// at the moment its request departs, with a call for each slot up to
// 100/s and for a lease of up to 10ms of its slots above. It has no
// goroutine: each call is its caller's.
package limiter

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Mode selects how a Limiter treats idle time.
type Mode string

// Modes of Config.Mode.
const (
	// Leaky spaces slots exactly 1/limit apart and never bursts, even after
	// idle time: a leaky bucket used as a meter.
	Leaky Mode = "leaky"
	// Token lets up to burst slots go at once after idle time, then holds the
	// average at limit: a token bucket of size burst, initially full.
	Token Mode = "token"
)

// Config configures a Limiter. New checks it.
type Config struct {
	// Mode is Leaky or Token. Required: defaults are applied by the caller's
	// configuration, not here.
	Mode Mode
	// Limit is the rate in slots (requests) per second, a finite number > 0.
	// Fractions are allowed: 0.5 is one slot every two seconds.
	Limit float64
	// Burst is how many slots Token mode lets go at once after idle time.
	// It must be >= 1 in every mode, so that one rule holds for New, SetRate
	// and ValidateRate; Leaky mode then ignores it and uses 1.
	Burst int
	// Warmup, when > 0, ramps the limit in force linearly from Limit/3 to
	// Limit over this time after the start (the now passed to New), so a cold
	// sink is not hit at full rate at once. Zero means no ramp. Must be >= 0.
	Warmup time.Duration
}

// ValidateRate reports whether SetRate would accept limit and burst: limit
// must be a finite number > 0 and burst must be >= 1. Callers that take a
// rate from outside, such as the admin API, check it with ValidateRate
// first, because SetRate ignores values it rejects.
func ValidateRate(limit float64, burst int) error {
	var errs []error
	if !(limit > 0) || math.IsInf(limit, 0) {
		errs = append(errs, fmt.Errorf("limiter: limit must be a finite number > 0, got %v", limit))
	}
	if burst < 1 {
		errs = append(errs, fmt.Errorf("limiter: burst must be >= 1, got %d", burst))
	}
	return errors.Join(errs...)
}

// validate returns every problem of c at once.
func (c Config) validate() error {
	var errs []error
	if c.Mode != Leaky && c.Mode != Token {
		errs = append(errs, fmt.Errorf("limiter: unknown mode %q (want %q or %q)", c.Mode, Leaky, Token))
	}
	if err := ValidateRate(c.Limit, c.Burst); err != nil {
		errs = append(errs, err)
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("limiter: warmup must be >= 0, got %v", c.Warmup))
	}
	return errors.Join(errs...)
}

// maxNanos caps an emission interval and a tolerance (about 146 years), so
// that absurdly small limits or huge bursts saturate instead of overflowing
// int64 nanoseconds.
const maxNanos = 1 << 62

// A Limiter hands out departure slots at a configured rate using GCRA (see
// the package comment). Its whole state is the theoretical arrival time of
// the next slot, kept in nanoseconds after the time passed to New, so it
// needs no goroutine and does no work between calls. A new Limiter starts
// full: in Token mode the first burst slots may go at once.
//
// Every method takes the current time from its caller, so tests and
// simulations can run on a fake clock. Returned times are computed from the
// time passed to New and carry its location and monotonic clock reading; if
// callers pass times from time.Now, wall-clock jumps do not move slots.
//
// The zero value is not usable; create Limiters with New.
//
// Limiter is safe for simultaneous use by multiple goroutines.
type Limiter struct {
	mu sync.Mutex

	// start is the now passed to New. All int64 times below are
	// nanoseconds after it, and so is the warm-up.
	start time.Time
	mode  Mode

	// limit is the configured rate in slots per second, the one in force
	// once any warm-up is over.
	limit float64
	// interval is 1e9/limit: the emission interval T in nanoseconds at
	// limit. It stays a float64 because most limits (3/s) have no whole
	// number of nanoseconds; see tatFrac.
	interval float64
	// tau is the burst tolerance (burst-1)·interval, split into whole and
	// fractional nanoseconds. It is fixed by the configured limit, also
	// during warm-up, so a warm-up shrinks the burst along with the rate.
	tau     int64
	tauFrac float64
	// warmup is the length of the ramp, or 0 when there is none or it has
	// been ended by SetRate.
	warmup int64

	// tat is the theoretical arrival time in whole nanoseconds, and
	// tatFrac in [0, 1) its sub-nanosecond part. Carrying the fraction keeps
	// slot k at start+k·T to within a nanosecond however large k grows;
	// truncating T to 333333333ns at 3/s would drift 10µs every 30 000
	// slots.
	tat     int64
	tatFrac float64
	// last is the latest slot handed out; SetRateAt re-spaces from it, or
	// from its own now when that is earlier.
	last int64
	// taken is whether any slot has been handed out: a late first caller
	// has no schedule to keep.
	taken bool
	// promised is the slot Next last told a caller to wait for, while it
	// was still to come, or -1; Allow takes it as a caller that waited for
	// it, whose lateness is its wake-up's, not idle time.
	promised int64

	// window remembers, in Leaky mode, the last departures, and holds the
	// next slot back until no 100ms or 1s window would hold more than
	// limit/10 + 1 or limit + 1 of them, whatever lateness the schedule
	// forgives. A rate change empties it.
	window departures
	// departed is the departure time of the last slot taken, in every
	// mode.
	departed int64
}

// New returns a Limiter for cfg whose start, for the first slot and for the
// warm-up, is now. It returns an error listing every problem of cfg.
func New(cfg Config, now time.Time) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		start:    now,
		mode:     cfg.Mode,
		warmup:   int64(cfg.Warmup),
		promised: -1,
	}
	l.setRate(cfg.Limit, cfg.Burst)
	return l, nil
}

// Reserve takes the next slot at or after now and returns its time. The
// caller sends at that time; the slot is used whether or not it does. Calls
// need not come with increasing times: a caller with an older now still gets
// a slot no earlier than that now. In Leaky mode slots follow a schedule
// exactly 1/limit apart; a caller late for its slot by less than half an
// interval (and at most 1ms: a timer waking late) gets it at its now, so
// the next slot can come up to that much sooner, and the long-run rate stays
// exact; no closed 100ms window holds more than limit/10 + 1 slots, and no
// second more than limit + 1. No slot is earlier than the start passed to
// New. Reserve does not allocate, but for the record of the departures of
// the last second while it grows (limit + 1 of them, in doubling steps).
func (l *Limiter) Reserve(now time.Time) time.Time {
	// Sub saturates instead of overflowing. A time before the start counts
	// as the start, so every slot and every state time below is >= 0.
	n := max(int64(now.Sub(l.start)), 0)

	l.mu.Lock()
	d := l.slotLocked(n)
	l.promised = -1
	l.takeLocked(n, d, l.lateAllowed(), false)
	l.mu.Unlock()

	return l.start.Add(time.Duration(d))
}

// Allow takes the next slot if it has come by now, and reports whether it
// did; when it has not, nothing is taken. With Next it is how a caller
// that may not use a slot waits for one: ask Next, sleep until then, and
// take the slot with Allow. If the schedule moved meanwhile (SetRate), Allow
// refuses and the caller asks Next again, so no slot is ever taken and then
// left unused. Allow allocates as little as Reserve.
func (l *Limiter) Allow(now time.Time) bool {
	n := max(int64(now.Sub(l.start)), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	slot := l.slotLocked(0) // the next slot, whenever the caller came
	if slot > n {
		return false
	}
	// The caller may have waited for this slot, so its lateness is a
	// timer's wake-up plus its own work since the last slot: up to an
	// interval more than Reserve's caller (who asks as soon as it has
	// sent) keeps the schedule, never more than maxCatchUp. A caller that
	// was not idle — Next told it to wait for this very slot, or it comes
	// within maxCatchUp of the last departure — keeps the schedule up to
	// maxCatchUp late whatever the interval (at 5000/s the ten slots of a
	// 2ms stall then go together, which the windows keep out of any 100ms
	// or second that is full), and later still keeps as much of it as that
	// allows and loses only the rest.
	busy := l.promised == slot || l.taken && n-l.departed <= maxCatchUp
	l.promised = -1
	late := min(int64(l.interval)+l.lateAllowed(), maxCatchUp)
	if busy {
		late = maxCatchUp
	}
	l.takeLocked(n, n, late, busy)
	return true
}

// takeLocked takes slot d for a caller at n: it moves TAT past it. In Leaky
// mode a caller late by at most late nanoseconds keeps the schedule; a busy
// one (not back from idle time) that is later still, because it stalled,
// keeps it as if late by exactly late. It requires that l.mu is held.
func (l *Limiter) takeLocked(n, d, late int64, busy bool) {
	if d > l.last {
		l.last = d
	}
	// A slot the window held back after its schedule's time was not late
	// by that much: the hold, up to an interval, is forgiven along with
	// the caller's own lateness (no more, or the schedule could fall ever
	// further behind and the window alone would set the rate).
	late += min(max(l.window.until-l.tat, 0), int64(l.interval))
	l.departed = max(n, d)
	l.window.add(l.departed)
	// TAT = max(TAT, now) + T, where T is the interval in force at the
	// slot's own time (it differs from l.interval only during warm-up).
	// In Leaky mode a caller that is only a little late — a timer's
	// wake-up — keeps the schedule instead of restarting it, so wake-up
	// lateness does not lower the rate. With Reserve's allowance, under half
	// an interval, any window of length w still holds at most w/T + 1
	// slots; Allow's, an interval more (at most maxCatchUp), lets a late
	// caller catch up by one slot, and the windows of the last departures
	// (slotLocked) keep even that out of any 100ms or second that is full
	// already. After real idle time the schedule restarts and there is no
	// burst; so it does at the first slot, which has no schedule to keep
	// (a pipeline whose first message came 19ms after the limiter was made
	// would otherwise send its second 1ms after it, at 50/s). A stalled
	// caller is not idle time: it sheds only what is past late, so a
	// wake-up 3ms late at 5000/s loses 1ms, not 3, and the slots still go
	// no closer together than after a wake-up exactly late by late.
	switch {
	case n <= l.tat:
	case l.tau > 0 || !l.taken:
		l.tat, l.tatFrac = n, 0
	case n-l.tat > late && busy:
		l.tat, l.tatFrac = n-late, 0
	case n-l.tat > late:
		l.tat, l.tatFrac = n, 0
	}
	l.taken = true
	f := l.tatFrac + l.intervalAt(d)
	whole := math.Floor(f)
	l.tat = addSat(l.tat, int64(whole))
	l.tatFrac = f - whole
}

// Next returns the time of the slot that Reserve(now) would hand out,
// without taking it. A caller that may not use a slot asks Next first and
// takes the slot with Allow only when it sends, so a slot is spent only by
// a request that goes: one that waits for its slot and then gives up (its
// message expired, the rate changed meanwhile) has taken nothing.
func (l *Limiter) Next(now time.Time) time.Time {
	n := max(int64(now.Sub(l.start)), 0)
	l.mu.Lock()
	d := l.slotLocked(n)
	l.promised = -1
	if d > n {
		l.promised = d
	}
	l.mu.Unlock()
	return l.start.Add(time.Duration(d))
}

// slotLocked returns the slot for a caller at n nanoseconds after the start:
// max(n, TAT-tau), rounded up to a whole nanosecond so that rounding never
// lets a slot go early, and in Leaky mode no earlier than the windows of
// the last departures allow. It requires that l.mu is held.
func (l *Limiter) slotLocked(n int64) int64 {
	d := l.tat - l.tau // tat >= 0 and tau <= maxNanos: no overflow
	if l.tatFrac > l.tauFrac {
		d++
	}
	return max(d, n, l.window.until)
}

// SetRate is SetRateAt(time.Now(), limit, burst).
func (l *Limiter) SetRate(limit float64, burst int) {
	l.SetRateAt(time.Now(), limit, burst)
}

// SetRateAt changes the limit (slots per second) and the burst as of now;
// the next Reserve uses them. A rate change takes effect from now, whatever
// was reserved under the old rate: the slots still owed (one in Leaky mode,
// up to the burst used in Token mode) keep their number and are spaced at
// the new interval from the last slot handed out, or from now if that slot
// lies in the future. Slots already handed out stay where they are. In
// Leaky mode the next slot thus comes one new interval after the last sent
// one, and never later than one new interval after now; in Token mode
// lowering the rate releases no burst and raising it makes no one wait
// longer, and idle time since the last slot refills at the new rate.
//
// SetRateAt ends a warm-up still running: whoever sets a rate at run time
// means that rate now, and Limit reports it at once.
//
// SetRateAt ignores values that ValidateRate rejects (limit <= 0, NaN or
// infinite, burst < 1) and keeps the rate in force, warm-up included; check
// with ValidateRate first to report them. Leaky mode ignores burst.
func (l *Limiter) SetRateAt(now time.Time, limit float64, burst int) {
	if ValidateRate(limit, burst) != nil {
		return
	}
	n := max(int64(now.Sub(l.start)), 0)
	l.mu.Lock()
	defer l.mu.Unlock()

	// Slots owed at the last slot, counted in intervals in force there:
	// in Leaky mode one, also when the last slot went late and the next
	// one was due already.
	owed := (float64(l.tat-l.last) + l.tatFrac) / l.intervalAt(l.last)
	if l.mode == Leaky {
		owed = max(owed, 1)
	}
	l.warmup = 0
	l.promised = -1
	l.setRate(limit, burst)
	base := min(l.last, n)
	span := math.Min(math.Max(owed*l.interval, 0), maxNanos)
	whole := math.Floor(span)
	l.tat = addSat(base, int64(whole))
	l.tatFrac = span - whole
}

// setRate sets the limit, interval and tolerance. It requires that l.mu is
// held (or that l is not yet shared) and that the values are valid.
func (l *Limiter) setRate(limit float64, burst int) {
	if l.mode == Leaky {
		burst = 1
	}
	l.limit = limit
	l.interval = math.Min(1e9/limit, maxNanos)
	tau := math.Min(float64(burst-1)*l.interval, maxNanos)
	l.tau = int64(math.Floor(tau))
	l.tauFrac = tau - math.Floor(tau)
	// The windows start afresh: a rate change takes effect from now.
	if l.mode == Leaky {
		l.window.reset(l.interval)
	}
}

// Limit returns the limit in slots per second in force at now: the
// configured one, or during a warm-up the point reached on the ramp from a
// third of it.
func (l *Limiter) Limit(now time.Time) float64 {
	n := int64(now.Sub(l.start))
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limitAt(n)
}

// limitAt returns the limit in force at n nanoseconds after the start. It
// requires that l.mu is held.
func (l *Limiter) limitAt(n int64) float64 {
	if l.warmup == 0 || n >= l.warmup {
		return l.limit
	}
	// Linear from limit/3 at the start to limit at the end of the warm-up;
	// before the start the ramp has not begun. Guava's SmoothWarmingUp
	// inspired the idea, not the curve.
	frac := math.Max(float64(n), 0) / float64(l.warmup)
	return l.limit/3 + l.limit*2/3*frac
}

// intervalAt returns the emission interval in nanoseconds in force at n
// nanoseconds after the start. It requires that l.mu is held.
func (l *Limiter) intervalAt(n int64) float64 {
	if l.warmup == 0 || n >= l.warmup {
		return l.interval
	}
	return math.Min(1e9/l.limitAt(n), maxNanos)
}

// maxLeakyLate bounds how late a Leaky caller may be and keep the schedule.
const maxLeakyLate = int64(time.Millisecond)

// maxCatchUp is how late a busy caller of Allow (one told to wait for its
// slot, or coming right after the last departure) may be and still keep
// the schedule, or keep as much of it as that allows when it stalled
// longer, and it bounds how late any other caller may be: later than this
// is idle time or a long stall, and catching it up would send requests
// closer together than a slow rate allows. At 5000/s (JetStream
// → HTTP, 2 cores shared with the broker and the sink) the stalls it
// catches up were a rate loss of 0.56–0.89% with 300µs; 0.03–0.18% with it.
const maxCatchUp = int64(2 * time.Millisecond)

// lateAllowed is how many nanoseconds late a Leaky caller may be and still
// keep the schedule: half an interval, at most maxLeakyLate. It requires that
// l.mu is held.
func (l *Limiter) lateAllowed() int64 {
	return min(int64(l.interval/2), maxLeakyLate)
}

// addSat returns a+b for b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
