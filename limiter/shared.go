package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedLua is the one script that reads and moves the shared state. It is
// sent as EVALSHA and, after a NOSCRIPT (a new or restarted server), once
// as EVAL, which loads it again.
//
//go:embed shared.lua
var sharedLua string

var sharedScript = redis.NewScript(sharedLua)

const (
	// DefaultSharedTimeout is SharedConfig.Timeout when it is left zero.
	DefaultSharedTimeout = 50 * time.Millisecond

	// A lease is leaseSlots slots (0.05 Redis calls per request) where
	// leaseSpan of the schedule holds that many (from 1000/s), else half
	// that span (below 1000/s a slot held ahead is one a late wake-up may
	// let pass), and at least leaseSpanMin of it, which caps the calls
	// above 10 000/s at 500 a second. See Leases.
	leaseSlots   = 20
	leaseSpan    = 20 * time.Millisecond
	leaseSpanMin = 2 * time.Millisecond
	// leaseShortFor is how long a replica of a fleet that let a leased
	// slot pass because it was stopped (it came stallLate or more after the
	// slot to take it, not to ask for the next: see takeLocked) holds as little
	// ahead as it may: it asks for no lease ahead, and leases shortSlots,
	// or shortSpan of the schedule where that is fewer, and then below
	// 1000/s leaseSpanMin of it (1 or 2 slots), at least leaseSpanMin. A
	// replica stopped again and again (a CPU quota) then strands one short
	// lease per stop: one or two slots below 1000/s, 5 from 1000/s (0.2
	// calls per slot), 10 at 5000/s (2 ms).
	leaseShortFor = 2 * time.Second
	shortSlots    = 5
	shortSpan     = 5 * time.Millisecond
	// prefetchLeadMax is the most time before the end of its lease at
	// which a replica asks for the next one (see prefetchLocked).
	prefetchLeadMax = 5 * time.Millisecond
	// maxLease caps a lease (above 500 000/s the span shrinks instead).
	maxLease = 1000
	// takenFor is how long a lease that began later than the server's now
	// (other replicas held the slots before it) says that the fleet's
	// schedule is spoken for, so that leases follow the demand (see
	// Demand): a moment when every replica waited for Redis at once does
	// not end it.
	takenFor = 100 * time.Millisecond
	// prefetchLead is the least time before the end of its lease at which
	// a replica asks for the next one (see prefetchLocked).
	prefetchLead = 2 * time.Millisecond

	// stallLate is how late a deadline must be noticed to tell that this
	// process did not run around it: it was stopped (SIGSTOP, a CPU quota
	// throttling its container) or starved of CPU. A wait for Redis whose
	// end came that late, or a call whose own deadline did, says nothing
	// about Redis, which may well have answered meanwhile. See Fallback.
	stallLate = 10 * time.Millisecond

	// probeGapMin and probeGapMax bound the time from the start of one
	// probe of Redis to the start of the next while fallen back. Each gap
	// is drawn uniformly between them, so replicas that fell back at the
	// same moment drift apart instead of probing in lockstep. No backoff:
	// the gap is the same after a second of outage as after an hour, so
	// the return never waits longer than probeGapMax for the next probe,
	// and a replica never probes more than 1/probeGapMin (5) times a
	// second.
	probeGapMin = 200 * time.Millisecond
	probeGapMax = 300 * time.Millisecond
	// maxCalls is how many Redis calls may run at once: a call that hangs
	// past its timeout (the client waits out its read timeout unless it
	// has ContextTimeoutEnabled) and one more, so that a hung connection
	// delays no probe, while a hung server collects no more than two
	// connections per replica.
	maxCalls = 2
)

// SharedConfig configures a Shared limiter. NewShared checks it.
type SharedConfig struct {
	// Key is the Redis key of the shared state, a hash. Every replica with
	// the same Key shares one limit. Required.
	Key string
	// Mode is Leaky or Token. It is not stored in Redis: each call brings
	// its own, so replicas sharing a Key must agree on it. Required.
	Mode Mode
	// Limit is the rate in slots per second, a finite number > 0. It is
	// written to Redis only if the key holds no limit yet (see Shared).
	Limit float64
	// Burst is how many slots Token mode lets go at once after idle time,
	// across all replicas together. It must be >= 1; Leaky mode ignores it.
	// Like Limit, it is written only if the key holds none.
	Burst int
	// FallbackLimit is this replica's own rate in slots per second while
	// Redis cannot be reached: a finite number > 0 and <= Limit, never
	// unlimited. Set it to Limit divided by the number of replicas to keep
	// the total within the sink's contract during an outage.
	FallbackLimit float64
	// Timeout bounds each Redis call; a call that takes longer counts as a
	// failure and the replica falls back. Zero means DefaultSharedTimeout
	// (50ms). Must be >= 0.
	Timeout time.Duration
	// AtLimitEvery is for SharedKeys only (Shared ignores it): when > 0,
	// how often a key whose rate is Limit calls Redis, to learn whether
	// another replica lowered it; in between its slots come from a
	// limiter of its own at Limit. Zero: every Allow calls Redis.
	AtLimitEvery time.Duration
	// Logger receives one warning when the limiter falls back, with the
	// error, and one info line when it returns; in between, a debug line
	// for each failed probe. Nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with its defaults: DefaultSharedTimeout for a zero
// Timeout, slog.Default() for a nil Logger.
func (c SharedConfig) withDefaults() SharedConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultSharedTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate returns every problem of c at once.
func (c SharedConfig) validate() error {
	var errs []error
	if c.Key == "" {
		errs = append(errs, errors.New("limiter: shared key must not be empty"))
	}
	if c.Mode != Leaky && c.Mode != Token {
		errs = append(errs, fmt.Errorf("limiter: unknown mode %q (want %q or %q)", c.Mode, Leaky, Token))
	}
	if err := ValidateRate(c.Limit, c.Burst); err != nil {
		errs = append(errs, err)
	}
	switch {
	case !(c.FallbackLimit > 0) || math.IsInf(c.FallbackLimit, 0):
		errs = append(errs, fmt.Errorf("limiter: fallback limit must be a finite number > 0, got %v", c.FallbackLimit))
	case c.Limit > 0 && c.FallbackLimit > c.Limit:
		errs = append(errs, fmt.Errorf("limiter: fallback limit must be <= limit (%v), got %v", c.Limit, c.FallbackLimit))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("limiter: shared timeout must be >= 0, got %v", c.Timeout))
	}
	return errors.Join(errs...)
}

// Shared is one limit shared by every replica that uses the same Redis key:
// N replicas together send at most the limit, not N times it.
//
// # State
//
// The GCRA state of the package comment (the theoretical arrival time) and
// the limit and burst live in one Redis hash, moved by one Lua script that
// takes its time from the server's TIME, so replicas' clocks never matter.
// Token mode's tolerance is global: after idle time all replicas together
// get burst slots at once, not burst each. The key expires when it has
// been idle for twice a full refill (at least ten seconds) past the last
// slot owed: by then a fresh key and the old one mean the same full bucket.
//
// # Leases
//
// A Redis call costs a round trip (30–40µs on loopback, more across a
// network), too much for every slot. So one call reserves a lease: k
// consecutive slots of the global schedule, k = 20 from 1000/s, limit ×
// 10ms rounded up below (1 at 100/s, 6 at 600/s), or limit × 2ms where
// that is more (40 at 20 000/s; at most 1000). The replica hands the
// lease out locally, slot i at its own time on the global schedule. It
// asks for the next lease before this one runs out, once its end is
// nearer than two round trips (2–5ms): a lease asked for only after the
// last slot would begin at the server's now, a round trip past the end of
// the schedule the replica held, and the slots of that round trip would
// be lost to the whole fleet (at 10 000/s a lease spans 2ms). So a busy
// replica holds one lease and at most one more ahead, and waits for Redis
// only when it had no slot to ask for in time. Redis sees at most 100
// calls a second from the whole fleet below 1000/s while no replica lets a
// slot pass, 0.05 per slot from 1000/s to 10 000/s, and 500 a second
// above. Below 1000/s leases are shorter because a slot a replica holds
// ahead is one that a late wake-up (beyond the catch-up below) lets pass,
// and the interval there is longer than a wake-up is late.
//
// Why leases no longer: a slot that passes in a lease that a replica holds
// is lost to the fleet until it is given back, and a replica stopped for
// longer than the span it holds ahead (a container throttled by its CPU
// quota stops for 100ms) strands all of it. A replica that keeps running
// strands nothing, and long leases keep Redis off its hot path; one that
// stops leases short ones (below), so the loss is kept small where it
// arises.
//
// What a replica strands it gives back. Every slot it lets pass, or drops
// with a lease, is counted (Unused) and reported on its next call to
// Redis, which keeps them as credit (leaky mode). A lease asked for while
// credit is kept may hold one slot of it: its slots go in one interval
// less than the schedule would give them. Handing the slots out again can
// only put more slots into a window than the schedule has, so Redis spaces
// them: at most one every 100ms/(replicas − 1) of the schedule, where
// replicas are those that called within the last second (a fleet of one
// takes none). They add at most replicas − 1 to any 100ms of the schedule,
// whose own slots are at most limit/10 + 1 there: the bound limit/10 +
// replicas, before the seams' jitter and the catch-up below. The fleet
// regains up to 10 × (replicas − 1) slots a second: the 5 slots a replica
// stopped every 400ms strands at 1000/s come back to a fleet of three
// within the next few hundred milliseconds. Credit is kept for a second
// after the last slot given back, and never more than a second's worth,
// 10 × (replicas − 1): a second may hold that many more than limit, never
// more, also when a fleet that had too few messages to use its slots gets
// more.
//
// A replica with few messages would strand most of every lease; told how
// many wait (Demand), it leases no more than that while the fleet's
// schedule is spoken for.
//
// A replica that stops pays for its stops itself: one that came 10ms or
// more late to take a slot of its lease (Reserve or Allow: it was stopped),
// and that is not alone (another replica called Redis within the last
// second; a replica alone strands slots no one else could use), asks for
// no lease ahead for the next 2 seconds, and leases 5 slots, or
// below 1000/s as few as it may, limit × 2ms rounded up (1 slot at 300/s, 2
// at 600/s), at least 2ms of the schedule (10 slots at 5000/s). Slots that
// Next finds passed went by while no request waited for one: idle time,
// which keeps the leases long (a replica whose requests come in bursts
// would otherwise call Redis for every one). A replica stopped every 400ms
// then strands one short lease per stop, and calls Redis up to once per
// slot below 1000/s, once per 5 from 1000/s, while it keeps stalling; the
// others keep their long leases. A fleet of three at 1000/s, one of them
// stalling so, calls Redis about 0.06 times per request.
//
// Slot times come from the server's clock. Each reply carries the
// server's now, read somewhere within the round trip, so the local time
// the reply arrived, less that now, is a latest possible offset between
// the two clocks: mapped with it, no slot is handed out before its server
// time. A slow round trip (a goroutine that a busy machine ran tens of
// milliseconds late) would shift a whole lease that late, onto the slots
// of the next lease, another replica's: two slots where the schedule has
// one. So the replica maps every lease with the least such offset it has
// seen, aged by a drift allowance of 100ppm; the offset of a reply that
// cannot be right together with the kept one (the server's clock was set
// back) replaces it. A lease is then late by the fastest recent round
// trip, microseconds on loopback, however slowly its own reply came; its
// first slots may have passed by then and are let go, which only
// under-sends. Within a lease slots keep their spacing, but for the
// catch-up below.
//
// A leased slot goes at its time, or up to 2ms late (maxCatchUp, the
// local Limiter's allowance for a busy caller) to a caller who came late:
// a replica that wakes late sends the slots it missed at once, so that a
// scheduler's wake-up jitter, which on a loaded machine is often longer
// than the interval above 1000/s, costs no rate. A slot not used by then
// is let pass, which only under-sends. The price is that slots bunch by
// up to 2ms: any 100ms holds at most limit/10 + replicas (one slot per
// replica for the round-trip jitter at the seams) + limit × 2ms rounded
// up (at 5000/s, 515 with five replicas instead of 505). Without the
// catch-up, a replica keeps a window to limit·w + 1 plus a slot per
// replica but loses every slot it wakes more than an interval late for,
// a large part of the rate above 1000/s on a loaded machine (the fleet
// section of docs/benchmarks.md).
//
// The price of leases is elsewhere. A replica that stops asking strands
// the rest of its lease and of the one ahead (up to 20ms of the global
// rate each, at its first stop) until it calls again and gives them back;
// a busy replica holds slots that others cannot take for that long; and
// after SetRate lowers the rate, leases already taken keep their old
// spacing, so right after a change the global rate can exceed the new
// limit by up to two leases per replica (up to 40ms of slots at the old
// rate). Bigger leases would mean fewer calls and more of all three.
//
// # The limit
//
// The limit and burst live in Redis beside the state, and every call uses
// the ones stored there. SetRate on one replica writes them at once, so
// every replica's next lease is at the new rate (within about 10ms). At
// start a replica writes its configured limit only if the key holds none:
// the first writer wins until someone calls SetRate. Otherwise every
// restart of a replica, a rolling deploy for instance, would undo a rate
// set at run time for all of them, and two replicas with different
// configurations would flip the shared rate back and forth. The flip side:
// a new limit in the configuration takes effect when the key expires or
// someone calls SetRate. If the key expires or Redis loses it, the next
// replica to call writes the limit it last knew, which includes a SetRate
// made on any replica it heard from.
//
// Beside the limit in force Redis keeps the fleet's ceiling, the limit
// SetRate last set (or the first writer's configured limit). Adapt, the
// adaptive rate's move, writes the limit in force only, and never above
// the ceiling: a rise computed on one replica cannot undo a lower rate
// set on another, and Ceiling tells every replica the rate.limit the
// fleet runs under.
//
// # Fallback
//
// Each Redis call runs under Timeout. On any failure (connection refused,
// timeout, authentication, a key of another type, a script error) the
// replica falls back to a local Limiter at min(FallbackLimit, limit),
// never unlimited, with Token mode's burst scaled down in proportion (limit
// is the shared limit last known). It logs a warning with the error once
// (after a timeout, a second one with the call's own error if it ends in
// one), stops calling Redis on the hot path, and probes it from its own
// goroutine. The first probe that answers within Timeout brings it back to
// the shared limit, logged once at info.
//
// A probe starts 200–300ms after the previous one, the gap drawn at
// random so that replicas that fell back together do not probe in
// lockstep, and the gap never backs off. So a replica probes at most five
// times a second (four on average), and after an outage of any length it
// is back on the shared limit within 300ms plus one round trip of Redis
// answering again (if two calls are still running then, the next probe
// waits for one of them to end: see below).
//
// A probe first opens and closes one connection with the client's own
// dialer (for a Cluster, to any of its seed addresses; a Ring has no such
// check) and calls through the client only if that works. So while Redis
// is down a probe costs one refused connection, and the client's pool
// records no failed dial: after PoolSize failed dials, counted over the
// client's life, go-redis's pool stops dialing and tries once a second,
// which would add up to a second to the return.
//
// The limiter waits for no call longer than Timeout. A call that outlives
// it (a client without ContextTimeoutEnabled waits out its read timeout)
// runs on in the background, and the next probe goes on a connection of
// its own. At most two calls run at once, so a hung server holds at most
// two connections of a replica; while both hang, the next probe waits for
// one of them to end.
//
// Reserve never waits longer than about Timeout, whatever Redis or the
// client do: calls run on goroutines of the limiter, and Reserve stops
// waiting for one at Timeout. A client built with ContextTimeoutEnabled
// also gives up the call itself at Timeout; otherwise the call runs on to
// the client's read timeout in the background, and Close waits for it.
// Lease slots still unused when the limiter falls back are dropped; the
// switch either way may put one slot of the new limiter (Token mode: its
// burst) right after the last of the old.
//
// Timeout is counted in time this process runs. A replica stopped for
// longer than Timeout (SIGSTOP, a container throttled by its CPU quota,
// which stops it for up to 100ms each period) would otherwise take every
// stop for a Redis that does not answer and add its fallback limit to the
// shared one until a probe brings it back. So a wait whose end is noticed
// 10ms or more late (the process did not run then) gets one more Timeout
// from that moment, and a call whose own deadline was noticed that late
// fails without falling back: its waiters ask again. A reply that arrives
// past the timeout is a success like any other: its slots that have
// passed are let pass and counted as unused, the rest are used. Stops
// between Timeout and Timeout + 10ms can still make a replica fall back.
//
// Reserve needs real time (time.Now) for now, since slots come from the
// server's clock; Limit and the fallback work from any now.
//
// Shared is safe for simultaneous use by multiple goroutines. Close stops
// its goroutines.
type Shared struct {
	client        redis.UniversalClient
	keys          []string
	key           string
	target        string // where Redis is, for the logs
	mode          Mode
	modeArg       string
	timeout       time.Duration
	fallbackLimit float64
	log           *slog.Logger
	// dial opens and closes one connection to Redis the way the client
	// would, or is nil; see Fallback.
	dial func(ctx context.Context) error
	// rand returns a number in [0, 1) for the gaps between probes.
	rand func() float64

	// wake asks the goroutine to look for work: a lease, a rate to write,
	// a new probe time, a call that ended. Size one, so that a signal is
	// never lost and a sender never waits.
	wake      chan struct{}
	quit      chan struct{}
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	mu sync.Mutex
	// limit and burst are the shared rate as last heard from Redis, or as
	// last set by SetRate or Adapt while pending; ceiling is the fleet's
	// rate.limit, the most limit may be, as last heard or set by SetRate.
	limit   float64
	burst   int
	ceiling float64
	// pending means SetRate's or Adapt's rate is not yet written to
	// Redis, and pendCeiling that it holds a SetRate's ceiling; pendSeq
	// counts SetRate and Adapt calls, so that a reply can tell whether it
	// wrote the latest one.
	pending, pendCeiling bool
	pendSeq              uint64
	// lease is the run of slots being handed out; ahead is the next one,
	// asked for before lease ran out (see prefetchLocked), or empty.
	lease, ahead lease
	// rtt is the round trip of the last call that answered.
	rtt time.Duration
	// epoch is the local time of the server's time zero by the least
	// offset seen (see Leases), as of epochAt; zero before any reply.
	epoch, epochAt time.Time
	// unused counts leased slots given up: skipped because they had
	// passed, or still in a lease when it was dropped. givenBack counts
	// those not yet reported to Redis, which hands them out again (see
	// Leases).
	unused, givenBack int64
	// id names this replica in Redis, where the replicas are counted.
	id string
	// shortUntil is when this replica may hold long leases and one ahead
	// again after a stop let a slot pass (see leaseShortFor).
	shortUntil time.Time
	// waiting is how many messages wait for a slot, as the caller last
	// told (Demand); 0 when it never did. takenUntil is when the fleet's
	// schedule may no longer be spoken for: takenFor after a lease began
	// later than the server's now. See Demand.
	waiting    int
	takenUntil time.Time
	// leaseEnd is the server time (µs) just past the last lease's slots.
	leaseEnd float64
	// alone is whether the last lease's reply counted no other replica
	// that called Redis within a second: a stop then strands slots that no
	// one else could have used, and leases stay long (see leaseShortFor).
	alone bool
	// op is the Redis call for the shared limit asked for or running,
	// nil when none is. A probe is never op, nor is a call left running
	// when the limiter fell back.
	op *call
	// calls counts the Redis calls running, at most maxCalls.
	calls int

	fallback  bool
	since     time.Time // when fallback began
	nextProbe time.Time // when the next probe may start
	// local is the fallback limiter, at localLimit and localBurst.
	local      *Limiter
	localLimit float64
	localBurst int
	closed     bool
}

// lease is a run of consecutive slots of the global schedule.
type lease struct {
	// at is the local time taken for the server's now of the reply; off
	// is slot 0's offset from it and interval the spacing, both in
	// microseconds. Slot i goes at at + max(0, off + i·interval).
	at       time.Time
	off      float64
	interval float64
	next, n  int
}

// slot returns the local time of slot i.
func (l *lease) slot(i int) time.Time {
	us := max(l.off+float64(i)*l.interval, 0)
	return l.at.Add(time.Duration(math.Min(math.Ceil(us*1e3), maxNanos)))
}

// call is one Redis call of the script, asked for by Reserve, SetRate or a
// probe, and run on a goroutine of its own.
type call struct {
	// done is closed once the result has been applied.
	done    chan struct{}
	want    int // slots to lease
	started bool
	probe   bool
	// abandoned means a caller gave up waiting for the call and fell
	// back; its error, when it comes, tells why. cut means the call's own
	// deadline ended it, which tells nothing more. stalled means that
	// deadline was noticed stallLate or more late, which tells nothing
	// about Redis.
	abandoned bool
	cut       bool
	stalled   bool

	// Set when the call starts: the rate and ceiling it sends, whether it
	// overwrites the stored rate (SetRate, Adapt) and ceiling (SetRate),
	// and which SetRate or Adapt that is.
	limit, ceiling  float64
	burst           int
	set, setCeiling bool
	seq             uint64
	// given is how many slots the call gives back (Shared.givenBack).
	given int64
}

// reply is what the script returns.
type reply struct {
	now   float64 // server time, microseconds
	base  float64 // slot 0's time before the max with now, microseconds
	limit float64
	burst int
	extra int // slots of credit the lease holds beyond the schedule: 0 or 1
	// replicas is how many replicas called within a second, this one
	// included; 0 when the script did not count them (token mode).
	replicas int
	// ceiling is the fleet's rate.limit, the most limit may be.
	ceiling float64
}

// NewShared returns a Shared limiter on cfg.Key through client, whose
// fallback limiter starts at now. It returns an error listing every problem
// of cfg. It makes one Redis call, waiting at most cfg.Timeout, to learn
// the shared limit and to write cfg.Limit and cfg.Burst if the key holds
// none; if Redis does not answer, the limiter starts fallen back, and
// NewShared still succeeds. The client stays the caller's: Close does not
// close it. Close the limiter to stop its goroutine.
func NewShared(client redis.UniversalClient, cfg SharedConfig, now time.Time) (*Shared, error) {
	err := cfg.validate()
	if client == nil {
		err = errors.Join(errors.New("limiter: shared limiter needs a redis client, got nil"), err)
	}
	if err != nil {
		return nil, err
	}
	s, err := newShared(client, cfg, now)
	if err != nil {
		return nil, err // not reached: the rate was validated above
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.run(ctx) })

	s.mu.Lock()
	op := s.requestLocked(0)
	s.mu.Unlock()
	w := s.newWait()
	defer w.stop()
	if !w.until(op.done) {
		s.mu.Lock()
		if s.op == op && !s.fallback {
			s.timedOutLocked()
		}
		s.mu.Unlock()
	}
	return s, nil
}

// wait is one caller's wait for Redis: Timeout of the time this process
// runs. A timer that fires stallLate or more past its time tells that the
// process was stopped or starved around it; the wait is then given one
// more Timeout, from the moment it noticed, instead of counting as Redis's
// failure to answer.
type wait struct {
	timeout  time.Duration
	timer    *time.Timer
	deadline time.Time
	extended bool
}

func (s *Shared) newWait() *wait {
	return &wait{timeout: s.timeout, timer: time.NewTimer(s.timeout), deadline: time.Now().Add(s.timeout)}
}

// until waits for done and reports true, or reports false once the wait
// is over.
func (w *wait) until(done <-chan struct{}) bool {
	for {
		select {
		case <-done:
			return true
		case <-w.timer.C:
			now := time.Now()
			if w.extended || now.Sub(w.deadline) < stallLate {
				return false
			}
			w.extended = true
			w.deadline = now.Add(w.timeout)
			w.timer.Reset(w.timeout)
		}
	}
}

func (w *wait) stop() {
	if w != nil {
		w.timer.Stop()
	}
}

// newShared returns a Shared limiter for a valid cfg with its defaults
// applied, without starting its goroutine.
func newShared(client redis.UniversalClient, cfg SharedConfig, now time.Time) (*Shared, error) {
	cfg = cfg.withDefaults()
	s := &Shared{
		client:        client,
		keys:          []string{cfg.Key},
		key:           cfg.Key,
		target:        target(client),
		dial:          dialer(client),
		rand:          rand.Float64,
		id:            strconv.FormatUint(rand.Uint64(), 36),
		mode:          cfg.Mode,
		modeArg:       "0",
		timeout:       cfg.Timeout,
		fallbackLimit: cfg.FallbackLimit,
		log:           cfg.Logger,
		wake:          make(chan struct{}, 1),
		quit:          make(chan struct{}),
		limit:         cfg.Limit,
		ceiling:       cfg.Limit,
		burst:         cfg.Burst,
	}
	if cfg.Mode == Token {
		s.modeArg = "1"
	}
	s.localLimit, s.localBurst = s.fallbackRateLocked()
	var err error
	s.local, err = New(Config{Mode: cfg.Mode, Limit: s.localLimit, Burst: s.localBurst}, now)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Reserve takes the next slot at or after now and returns its time. The
// caller sends at that time; the slot is used whether or not it does.
// While the shared limit is in force the slot comes from this replica's
// lease, and when the lease is used up Reserve waits for the next one,
// at most Timeout; past it the limiter falls back and the slot comes from
// the local limiter. now must come from time.Now.
func (s *Shared) Reserve(now time.Time) time.Time {
	t, _ := s.slot(now, reserve)
	return t
}

// Next returns when the slot that Reserve(now) would take comes, without
// taking it. While the shared limit is in force that is the next usable
// slot of this replica's lease; with the lease used up, Next waits for the
// next lease as Reserve does (at most Timeout) and keeps it for Reserve.
// now must come from time.Now.
func (s *Shared) Next(now time.Time) time.Time {
	t, _ := s.slot(now, peek)
	return t
}

// Allow takes the next slot if it has come by now, and reports whether it
// did; when it has not, nothing is taken (see Limiter.Allow). It may wait
// for a lease as Reserve does. now must come from time.Now.
func (s *Shared) Allow(now time.Time) bool {
	_, taken := s.slot(now, allow)
	return taken
}

// use says what slot does with the slot it finds.
type use int

const (
	reserve use = iota // take it (Reserve)
	peek               // only tell it (Next)
	allow              // take it if it has come (Allow)
)

// slot finds the next slot for a caller at now and does with it what how
// says; it reports whether it took it.
func (s *Shared) slot(now time.Time, how use) (time.Time, bool) {
	var w *wait
	expired := false
	s.mu.Lock()
	for {
		if s.fallback || s.closed {
			var t time.Time
			taken := true
			switch how {
			case reserve:
				t = s.local.Reserve(now)
			case peek:
				t, taken = s.local.Next(now), false
			case allow:
				t, taken = now, s.local.Allow(now)
			}
			s.mu.Unlock()
			w.stop()
			return t, taken
		}
		if t, taken, ok := s.takeLocked(now, how); ok {
			if taken {
				s.prefetchLocked(now)
			}
			s.mu.Unlock()
			w.stop()
			return t, taken
		}
		if expired {
			// Redis did not deliver a lease within Timeout: whether the
			// call hangs or answered too slowly for the leases to keep up,
			// this caller has waited as long as it may.
			s.timedOutLocked()
			continue
		}
		op := s.requestLocked(s.leaseSizeLocked(now))
		s.mu.Unlock()
		if w == nil {
			w = s.newWait()
		}
		expired = !w.until(op.done)
		s.mu.Lock()
	}
}

// takeLocked finds the next usable slot of the lease, then of the one
// ahead, skipping those too late for now, and does with it what how says
// (the ones too late stay skipped). It reports whether it took the slot,
// and false for ok when the leases have none left. It requires that s.mu
// is held.
func (s *Shared) takeLocked(now time.Time, how use) (slot time.Time, taken, ok bool) {
	l := &s.lease
	for {
		if l.next >= l.n {
			if s.ahead.n == 0 {
				return time.Time{}, false, false
			}
			*l, s.ahead = s.ahead, lease{}
		}
		at := l.slot(l.next)
		l.next++
		t := at
		if now.After(t) {
			t = now
		}
		if t.Sub(at) <= time.Duration(maxCatchUp) {
			if how == reserve || how == allow && !t.After(now) {
				return t, true, true
			}
			l.next--
			return t, false, true
		}
		s.unused++
		s.givenBack++
		if now.Sub(at) >= stallLate && how != peek && !s.alone {
			// A caller came that late to take a slot: this replica was
			// stopped. Slots that Next finds passed went by while no
			// request waited for one: idle time, not a stop. A replica
			// alone strands nothing another could have used.
			s.shortUntil = now.Add(leaseShortFor)
		}
	}
}

// Demand tells the limiter how many messages wait for a slot now, the one
// the caller is about to ask Next or Reserve for included. While the
// fleet's schedule is spoken for ahead of the server's now (a lease began
// later than that, and than this replica's own lease before it, within the
// last takenFor: other replicas held the slots before it, and the shared
// limit is what holds the fleet back), a
// lease is no longer than that, though at least limit × 2ms (2 slots at
// 1000/s), and no lease is asked for ahead of one that holds enough slots
// for them. A replica with few messages (a quiet partition) then leases
// about what it can use, instead of a lease per message whose other slots
// pass, lost to the replicas with a backlog until given back. While the
// schedule is not spoken for, the fleet has slots to spare, and leases stay
// whole: a replica whose messages arrive one by one at a high rate would
// otherwise call Redis for each. A caller that never calls Demand leases
// as if every message waited.
func (s *Shared) Demand(waiting int) {
	s.mu.Lock()
	s.waiting = max(waiting, 1)
	s.mu.Unlock()
}

// prefetchLocked asks for the next lease once the end of this one is
// nearer than two round trips to Redis, but at least prefetchLead and at
// most prefetchLeadMax (a round trip that a stall drew out would
// otherwise have every lease asked for at once); see Leases for why. It
// requires that s.mu is held.
func (s *Shared) prefetchLocked(now time.Time) {
	l := &s.lease
	if s.op != nil || s.ahead.n > 0 || s.fallback || s.closed || now.Before(s.shortUntil) {
		return // a replica stopped lately holds no more than one lease
	}
	if l.next >= l.n {
		return // the next caller asks, if one comes
	}
	if s.waiting > 0 && s.waiting-1 <= l.n-l.next {
		return // this lease has a slot for every message waiting after this one
	}
	end := l.slot(l.n - 1).Add(time.Duration(l.interval * 1e3))
	if end.Sub(now) <= min(max(prefetchLead, 2*s.rtt), prefetchLeadMax) {
		s.requestLocked(s.leaseSizeLocked(now))
	}
}

// dropLeaseLocked gives up the rest of the lease and the one ahead,
// counting them as unused. It requires that s.mu is held.
func (s *Shared) dropLeaseLocked() {
	n := int64(max(s.lease.n-s.lease.next, 0) + s.ahead.n)
	s.unused += n
	s.givenBack += n
	s.lease, s.ahead = lease{}, lease{}
}

// Unused returns how many leased slots this replica has given up since it
// started: slots that had passed when it came to them (it woke too late,
// or stopped asking) and slots of a lease it dropped (SetRate, a fallback,
// Close). It is exported as shaper_limiter_unused_total.
func (s *Shared) Unused() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unused
}

// leaseSizeLocked returns how many slots to lease at the current limit,
// at now. It requires that s.mu is held.
func (s *Shared) leaseSizeLocked(now time.Time) int {
	k := math.Min(math.Ceil(s.limit*leaseSpan.Seconds()), leaseSlots)
	if k < leaseSlots {
		k = math.Ceil(s.limit * leaseSpan.Seconds() / 2) // below 1000/s
	}
	if now.Before(s.shortUntil) { // a stop let a slot pass lately: see leaseShortFor
		if k = math.Min(math.Ceil(s.limit*shortSpan.Seconds()), shortSlots); k < shortSlots {
			k = 1
		}
	}
	if now.Before(s.takenUntil) && s.waiting > 0 {
		k = math.Min(k, float64(s.waiting)) // see Demand
	}
	k = math.Max(k, math.Ceil(s.limit*leaseSpanMin.Seconds()))
	return int(math.Max(1, math.Min(k, maxLease)))
}

// requestLocked returns the call that will bring a lease of want slots:
// the one asked for and not yet started, grown to want if need be, or a
// new one. It requires that s.mu is held.
func (s *Shared) requestLocked(want int) *call {
	if s.op == nil {
		s.op = &call{done: make(chan struct{}), want: want}
		s.signal()
	} else if !s.op.started && s.op.want < want {
		s.op.want = want
	}
	return s.op
}

// signal wakes the goroutine without waiting.
func (s *Shared) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// SetRate changes the shared limit and burst for every replica on the key.
// This replica's next Reserve uses them, and its rest of the lease is
// dropped; the others pick them up with their next lease. The write to
// Redis happens on the limiter's goroutine, so SetRate does not wait for
// it; while Redis cannot be reached it is kept and written when Redis
// answers again. In Redis, slots owed at the time of the change keep their
// number and are re-spaced at the new interval, as Limiter.SetRate does.
// The fallback limit follows: min(FallbackLimit, limit). The limit is
// also the fleet's ceiling, the most Adapt may set: the configured
// rate.limit until a rate change at run time.
//
// SetRate ignores values that ValidateRate rejects.
func (s *Shared) SetRate(limit float64, burst int) {
	if ValidateRate(limit, burst) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.burst, s.ceiling = limit, burst, limit
	s.pendCeiling = true
	s.rateChangedLocked()
}

// Adapt changes the shared limit in force for every replica, as SetRate
// does, but not the ceiling, and never above it: the adaptive rate moves
// the limit below the fleet's rate.limit, and a rise computed on one
// replica never undoes another replica's SetRate to a lower rate. Adapt
// ignores a limit that ValidateRate rejects.
func (s *Shared) Adapt(limit float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ValidateRate(limit, s.burst) != nil {
		return
	}
	s.limit = min(limit, s.ceiling)
	s.rateChangedLocked()
}

// rateChangedLocked puts a rate set by SetRate or Adapt in force here and
// has the limiter's goroutine write it to Redis. It requires that s.mu is
// held.
func (s *Shared) rateChangedLocked() {
	s.pending = true
	s.pendSeq++
	s.dropLeaseLocked()
	s.syncLocalLocked()
	s.signal()
}

// Ceiling returns the fleet's rate.limit, the most the limit in force may
// be: the configured limit, or the last SetRate on any replica, as last
// heard from Redis.
func (s *Shared) Ceiling() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ceiling
}

// Limit returns the limit in force: the shared one as last heard from
// Redis (or set by SetRate), or the fallback limit while fallen back.
func (s *Shared) Limit(now time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fallback || s.closed {
		return s.local.Limit(now)
	}
	return s.limit
}

// Fallback reports whether the limiter has fallen back to its local limit
// because Redis cannot be reached, or has been closed.
func (s *Shared) Fallback() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fallback || s.closed
}

// Close stops the limiter's goroutines and waits for them, including Redis
// calls in flight (cut short if the client has ContextTimeoutEnabled).
// Afterwards Reserve uses the local fallback limiter, so a limiter closed
// too early still never sends unlimited. Close does not close the client.
// It always returns nil.
func (s *Shared) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.dropLeaseLocked()
		s.mu.Unlock()
		s.cancel()
		close(s.quit)
		s.wg.Wait()
	})
	return nil
}

// run is the limiter's goroutine: it starts every Redis call, each on a
// goroutine of its own so that neither a caller nor the probe schedule
// ever waits on Redis longer than it chooses to, and probes Redis while
// fallen back.
func (s *Shared) run(ctx context.Context) {
	probe := time.NewTimer(time.Hour)
	probe.Stop()
	defer probe.Stop()
	for {
		s.mu.Lock()
		op, wait := s.nextLocked(time.Now())
		s.mu.Unlock()
		if op != nil {
			s.wg.Go(func() { s.do(ctx, op) })
			continue
		}
		if wait > 0 {
			probe.Reset(wait)
		}
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-probe.C:
		}
	}
}

// nextLocked returns the call to start at now, or nil and how long until
// the next probe (0 for none, or until a call ends). On the shared limit
// calls run one at a time; while fallen back a probe starts once its time
// has come. It requires that s.mu is held.
func (s *Shared) nextLocked(now time.Time) (*call, time.Duration) {
	if s.closed && s.op != nil && !s.op.started {
		// Asked for before Close; its waiters use the local limiter now.
		close(s.op.done)
		s.op = nil
	}
	if s.closed || s.calls >= maxCalls {
		return nil, 0 // the end of a call wakes the goroutine
	}
	var op *call
	switch {
	case s.fallback:
		if now.Before(s.nextProbe) {
			return nil, s.nextProbe.Sub(now)
		}
		op = &call{done: make(chan struct{}), probe: true}
		s.nextProbe = now.Add(s.probeGap())
	case s.op != nil && s.op.started:
		return nil, 0
	case s.op != nil:
		op = s.op
	case s.pending:
		op = &call{done: make(chan struct{})}
		s.op = op
	default:
		return nil, 0
	}
	op.started = true
	op.limit, op.burst, op.ceiling = s.limit, s.burst, s.ceiling
	op.set, op.setCeiling, op.seq = s.pending, s.pendCeiling, s.pendSeq
	op.given, s.givenBack = s.givenBack, 0
	s.calls++
	return op, 0
}

// probeGap returns the time from the start of one probe to the start of
// the next, between probeGapMin and probeGapMax.
func (s *Shared) probeGap() time.Duration {
	return probeGapMin + time.Duration(s.rand()*float64(probeGapMax-probeGapMin))
}

// do makes one call of the script, a probe's preceded by its dial, and
// applies the result.
func (s *Shared) do(ctx context.Context, op *call) {
	write := "keep:"
	switch {
	case op.setCeiling:
		write = "ceiling:"
	case op.set:
		write = "limit:"
	}
	write += strconv.FormatFloat(op.ceiling, 'g', -1, 64)
	start := time.Now()
	deadline := start.Add(s.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	// When this process noticed the deadline: late if it did not run
	// around it (see stallLate).
	noticed := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() { noticed <- time.Now() })
	var vals []any
	var err error
	if op.probe && s.dial != nil {
		err = s.dial(ctx)
	}
	if err == nil {
		vals, err = sharedScript.Run(ctx, s.client, s.keys,
			op.want, s.modeArg, strconv.FormatFloat(op.limit, 'g', -1, 64), op.burst, write, s.id+":"+strconv.FormatInt(op.given, 10)).Slice()
	}
	recv := time.Now()
	cancel()
	// A call that failed at or past its deadline timed out, whether the
	// context said so first or the connection's read deadline (set to the
	// same time) did.
	timedOut := err != nil && (ctx.Err() == context.DeadlineExceeded || !recv.Before(deadline))
	var r reply
	if err == nil {
		r, err = parseReply(vals)
	}
	switch {
	case timedOut && (<-noticed).Sub(deadline) >= stallLate:
		// The deadline was noticed late: this process did not run
		// around it, and Redis may have answered meanwhile.
		op.stalled = true
		err = fmt.Errorf("limiter: shared key %q: the call to redis at %s ended %v after it began, its timeout %v noticed late: this process was stopped or starved",
			s.key, s.target, recv.Sub(start).Round(time.Millisecond), s.timeout)
	case timedOut:
		op.cut = true
		err = s.timeoutError()
	case err != nil:
		err = fmt.Errorf("limiter: shared key %q: %w", s.key, err)
	}
	s.mu.Lock()
	s.applyLocked(op, r, recv, recv.Sub(start), err)
	s.mu.Unlock()
	s.signal() // a call slot is free
}

// applyLocked takes in the result of op, received at recv after a round
// trip of rtt. It requires that s.mu is held.
func (s *Shared) applyLocked(op *call, r reply, recv time.Time, rtt time.Duration, err error) {
	s.calls--
	defer func() {
		if s.op == op {
			s.op = nil
		}
		close(op.done)
	}()
	if err != nil {
		switch {
		case s.closed:
		case op.abandoned:
			if !op.cut {
				// The timeout alone does not say why; this does.
				s.log.Warn("shared limiter: the redis call that timed out has failed", "key", s.key, "redis", s.target, "err", err)
			}
		case op.stalled && !op.probe:
			// Not Redis's failure: the waiters ask again, each within
			// its own wait.
			s.log.Debug("shared limiter: a redis call outlived its timeout while this process did not run; asking again",
				"key", s.key, "redis", s.target, "err", err)
		case op.probe:
			if s.fallback {
				s.log.Debug("shared limiter: redis probe failed", "key", s.key, "redis", s.target,
					"next_probe", s.nextProbe.Sub(recv).Round(time.Millisecond), "err", err)
			}
		case !s.fallback:
			s.fallBackLocked(err, recv)
		}
		return
	}
	if op.abandoned {
		// A caller gave up on it and fell back; a probe may have brought
		// the limiter back since, with a newer reply. Only its write of
		// the rate counts.
		if op.set && op.seq == s.pendSeq {
			s.pending, s.pendCeiling = false, false
		}
		return
	}
	// A SetRate made while the call ran is newer than what it read.
	newer := s.pending && !(op.set && op.seq == s.pendSeq)
	if !newer {
		s.pending, s.pendCeiling = false, false
		s.limit, s.burst, s.ceiling = r.limit, r.burst, r.ceiling
		s.syncLocalLocked()
	}
	if s.fallback {
		if !op.probe {
			return // not reached: the call that failed or timed out is the one that fell back
		}
		s.fallback = false
		s.dropLeaseLocked()
		s.log.Info("shared limiter: redis answers again; back to the shared limit",
			"key", s.key, "limit", s.limit, "fallback_for", recv.Sub(s.since).Round(time.Millisecond))
	}
	// A reply that came past the timeout (this process was stopped or
	// starved meanwhile) is a success like any other: its slots that have
	// passed are let pass (takeLocked), and those to come are used. Only
	// without an offset kept from an earlier reply can its slots not be
	// placed: its own round trip would shift them that late.
	placeable := !s.epoch.IsZero() || rtt <= s.timeout
	at := s.mapLocked(r.now, recv, rtt)
	s.rtt = rtt
	if op.want > 0 && !newer && !s.closed && placeable {
		next := lease{
			at:       at,
			off:      r.base - r.now,
			interval: 1e6 / r.limit * float64(op.want-r.extra) / float64(op.want),
			n:        op.want,
		}
		// Slots between the server's now, or the end of this replica's
		// own lease, and this one are other replicas': see Demand.
		if r.base-max(r.now, s.leaseEnd) > 1e6/r.limit {
			s.takenUntil = recv.Add(takenFor)
		}
		s.leaseEnd = r.base + float64(next.n)*next.interval
		s.alone = r.replicas == 1
		if s.lease.next < s.lease.n {
			s.ahead = next // asked for ahead (prefetchLocked)
		} else {
			s.lease = next
		}
	}
}

// maxDrift is how fast the server's clock is taken to drift from this
// replica's at most (100ppm), to age the offset kept between them.
const maxDrift = 1e-4

// mapLocked returns the local time of the server's now, from a reply that
// carried it and was received at recv after a round trip of rtt, and keeps
// the least offset between the clocks (see Leases). It requires that s.mu
// is held.
func (s *Shared) mapLocked(now float64, recv time.Time, rtt time.Duration) time.Time {
	epoch := recv.Add(-time.Duration(math.Min(now*1e3, maxNanos)))
	if !s.epoch.IsZero() {
		kept := s.epoch.Add(time.Duration(maxDrift * float64(recv.Sub(s.epochAt))))
		// This reply says the offset lies in [epoch-rtt, epoch]; a kept
		// one below that cannot be right (the server's clock went back).
		if kept.Before(epoch) && !kept.Before(epoch.Add(-rtt)) {
			epoch = kept
		}
	}
	s.epoch, s.epochAt = epoch, recv
	return epoch.Add(time.Duration(math.Min(now*1e3, maxNanos)))
}

// fallBackLocked switches to the local limiter because of err, at at. The
// call for the shared limit, if one is running, runs on without waiters;
// one not yet started never will be. It requires that s.mu is held.
func (s *Shared) fallBackLocked(err error, at time.Time) {
	s.fallback = true
	s.since = at
	s.dropLeaseLocked()
	if op := s.op; op != nil {
		if !op.started {
			close(op.done) // its waiters use the local limiter now
		}
		s.op = nil
	}
	s.nextProbe = at.Add(s.probeGap())
	s.log.Warn("shared limiter: redis failed; falling back to the local limit",
		"key", s.key, "redis", s.target, "fallback_limit", s.localLimit, "err", err)
	s.signal() // the goroutine arms the probe
}

// timedOutLocked falls back because a caller waited Timeout for Redis in
// vain. The call it waited for is marked, so that its error, when it comes,
// is logged too: the timeout alone does not say why. It requires that s.mu
// is held.
func (s *Shared) timedOutLocked() {
	if s.op != nil && s.op.started {
		s.op.abandoned = true
	}
	s.fallBackLocked(s.timeoutError(), time.Now())
}

// timeoutError is the error of a Redis call that did not end within
// Timeout.
func (s *Shared) timeoutError() error {
	return fmt.Errorf("limiter: shared key %q: redis at %s did not answer within the timeout %v", s.key, s.target, s.timeout)
}

// target describes where client sends its commands, for the logs.
func target(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return "cluster " + strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		return "ring " + strings.Join(slices.Sorted(maps.Keys(c.Options().Addrs)), ",")
	}
	return fmt.Sprintf("%T", client)
}

// dialer returns a function that opens one connection to Redis the way
// client's pool would, with its own dialer, and closes it again: for a
// Cluster to any of its seed addresses. It returns nil for other clients.
func dialer(client redis.UniversalClient) func(ctx context.Context) error {
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	var network string
	var addrs []string
	switch c := client.(type) {
	case *redis.Client:
		// A failover client's dialer asks the sentinels for the master
		// and ignores the address.
		o := c.Options()
		dial, network, addrs = o.Dialer, o.Network, []string{o.Addr}
	case *redis.ClusterClient:
		o := c.Options()
		dial, network, addrs = o.Dialer, "tcp", o.Addrs
		if dial == nil {
			dial = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
		}
	}
	if dial == nil || len(addrs) == 0 {
		return nil
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, addr := range addrs {
			conn, err := dial(ctx, network, addr)
			if err == nil {
				_ = conn.Close() // only the connection mattered
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// fallbackRateLocked returns the fallback limiter's limit, min(FallbackLimit,
// limit), and its burst, the shared burst scaled by the same ratio (at
// least 1), so N replicas fallen back together burst no more than the
// shared limiter would. It requires that s.mu is held.
func (s *Shared) fallbackRateLocked() (float64, int) {
	limit := math.Min(s.fallbackLimit, s.limit)
	if s.mode == Leaky {
		return limit, 1
	}
	return limit, max(1, int(float64(s.burst)*limit/s.limit))
}

// syncLocalLocked brings the fallback limiter to the current rate. It
// requires that s.mu is held.
func (s *Shared) syncLocalLocked() {
	limit, burst := s.fallbackRateLocked()
	if limit != s.localLimit || burst != s.localBurst {
		s.localLimit, s.localBurst = limit, burst
		s.local.SetRate(limit, burst)
	}
}

// parseReply checks and decodes the script's reply.
func parseReply(vals []any) (reply, error) {
	var r reply
	if len(vals) != 8 {
		return r, fmt.Errorf("unexpected script reply %v", vals)
	}
	var strs [5]string
	for i := range strs {
		s, ok := vals[i].(string)
		if !ok {
			return r, fmt.Errorf("unexpected script reply %v", vals)
		}
		strs[i] = s
	}
	sec, err1 := strconv.ParseInt(strs[0], 10, 64)
	usec, err2 := strconv.ParseInt(strs[1], 10, 64)
	base, err3 := strconv.ParseFloat(strs[2], 64)
	limit, err4 := strconv.ParseFloat(strs[3], 64)
	ceiling, err5 := strconv.ParseFloat(strs[4], 64)
	burst, ok := vals[5].(int64)
	extra, ok2 := vals[6].(int64)
	replicas, ok3 := vals[7].(int64)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || !ok || !ok2 || !ok3 || extra < 0 || extra > 1 || replicas < 0 {
		return r, fmt.Errorf("unexpected script reply %v", vals)
	}
	if ValidateRate(limit, int(burst)) != nil || ValidateRate(ceiling, 1) != nil || math.IsNaN(base) || math.IsInf(base, 0) {
		return r, fmt.Errorf("script reply holds a bad rate: limit %v, burst %d, ceiling %v, base %v", limit, burst, ceiling, base)
	}
	r.now = float64(sec*1_000_000 + usec)
	r.base, r.limit, r.burst, r.extra, r.ceiling, r.replicas = base, limit, int(burst), int(extra), ceiling, int(replicas)
	return r, nil
}
