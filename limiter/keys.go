package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed keys.lua
var keysLua string

var keysScript = redis.NewScript(keysLua)

// SharedKeys holds each key's own limit (a pipeline's rate.per_key, or
// each destination's adaptive limit) in Redis, one hash per key under a
// common prefix, so that every replica with the same prefix holds a key to
// one limit together.
//
// A key's slots are leased as the pipeline's are (see Shared), by a rule for
// the size half as long: a call takes up to 10ms of the key's schedule, at
// most 10 slots, so a key at up to 100/s takes one slot per call and a key at
// 1000/s ten. A pipeline takes a key's slot only at the moment it sends, after the
// key's lane had its turn and the pipeline's own limit gave a slot, so a key's
// lease differs from the pipeline's in three ways. A call leases only once the
// key's next slot is due within a lease's span (it never holds slots ahead of
// a full lease), and asks for no lease ahead of the one it holds: when the
// lease runs out, the next Allow calls. A leased slot goes at its time or up
// to a lease's span (10ms, keyCatchUp) late, not 2ms: the lane's turn, the
// pipeline's slot and the calls to Redis all come between the key's slot and
// the departure. So any 100ms holds at most limit/10 + replicas, and up to
// 10ms of the key's slots more when replicas come late for them. A slot later
// than that is let pass and counted (Unused). And a lease is as long as the
// last one's use: as many slots as the last lease used (at least one) when
// some passed, one more when it used them all, at most the full size, so a key
// whose lane gets its turns less often than its slots come (other keys or the
// pipeline's limit hold it) leases about as many as it uses. A reply that took
// longer than keyCatchUp keeps only its first slot: mapped from its arrival,
// the rest could fall on the slots of the leases after it. A replica stopped
// now and then (a CPU quota) strands the rest of one lease per stop. A key's
// slots let pass are not given back: a lease of a key strands at most its
// 10ms.
//
// Each key's rate lives in its hash beside its state, and every call uses
// the one stored there: Limit at first, and after a SetRate on any
// replica, the rate it set. SetRate makes no call of its own: the next
// Allow carries the new rate, and every Allow's answer brings back the
// rate in force, so the other replicas take it at their next Allow. A
// lower rate always wins; a higher one is written only while the key
// still holds the rate it was computed from, so that a rise computed from
// a rate already stale never undoes another replica's decrease. A rate
// never exceeds Limit, or the ceiling SetCeiling set since. SetRate drops
// the rest of the key's lease on this replica. A key expires as its state
// does (once idle for a full refill and a second); the next caller writes
// the rate it last heard, so a rate set lives as long as some replica
// remembers it.
//
// With AtLimitEvery, a key whose rate is Limit and that has no SetRate to
// carry calls Redis at most once per AtLimitEvery, for one slot, and
// otherwise takes its slots from a limiter of its own at Limit, on this
// replica: for keys whose Limit another shared limit already holds (a
// destination's ceiling under the pipeline's rate.limit), so that only a
// key whose rate was lowered costs Redis calls.
//
// While Redis fails (an error, or no answer within Timeout), every key
// falls back to a limiter of its own at FallbackLimit (or its rate, if
// lower), and the first Allow after a pause of 200-300ms tries Redis
// again: an outage costs one Timeout per pause, not one per request.
// SharedKeys has no goroutine; it is safe for simultaneous use.
type SharedKeys struct {
	client   redis.UniversalClient
	prefix   string
	target   string
	modeArg  string
	mode     Mode
	burst    int
	fallback float64
	timeout  time.Duration
	atLimit  time.Duration
	log      *slog.Logger

	mu sync.Mutex
	// limit is the most any key's rate may be: cfg.Limit, or the last
	// SetCeiling.
	limit float64
	// down is when Redis last failed, and retry when the next Allow may
	// try it again; both zero while it answers.
	down, retry time.Time

	// unused counts the keys' leased slots let pass or dropped.
	unused atomic.Int64
}

// Unused returns how many leased slots of its keys this replica has let
// pass or dropped since it started (see SharedKeys).
func (s *SharedKeys) Unused() int64 {
	return s.unused.Load()
}

// NewSharedKeys returns the per-key limits of cfg through client, which
// stays the caller's. Each key is limited as a Shared limiter of cfg would
// be, in a Redis hash of its own: cfg.Key followed by the key. cfg's Limit,
// Burst and FallbackLimit are each key's, and its FallbackLimit is a key's
// own limit on this replica while Redis fails.
func NewSharedKeys(client redis.UniversalClient, cfg SharedConfig) (*SharedKeys, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("limiter: shared keys: need a Redis client")
	}
	cfg = cfg.withDefaults()
	s := &SharedKeys{
		client: client, prefix: cfg.Key, target: target(client), modeArg: "0", mode: cfg.Mode,
		limit: cfg.Limit, burst: cfg.Burst, fallback: cfg.FallbackLimit, timeout: cfg.Timeout, atLimit: cfg.AtLimitEvery, log: cfg.Logger,
	}
	if cfg.Mode == Token {
		s.modeArg = "1"
	}
	return s, nil
}

// For returns the limiter of key, starting at now.
func (s *SharedKeys) For(key string, now time.Time) *SharedKey {
	k := &SharedKey{keys: s, redisKey: s.prefix + key, local: s.local(s.fallback, s.fallbackBurst(), now)}
	if s.atLimit > 0 {
		k.own = s.local(s.ceiling(), s.burst, now)
	}
	return k
}

// fallbackBurst is the burst of a key's fallback limiter: 1 in Leaky
// mode; in Token mode the shared burst scaled as the fallback limit scales
// the ceiling, as Shared's fallback does.
func (s *SharedKeys) fallbackBurst() int {
	if s.mode != Token {
		return 1
	}
	return max(1, int(float64(s.burst)*s.fallback/s.ceiling()))
}

// local returns a limiter of this replica at limit and burst, from now.
func (s *SharedKeys) local(limit float64, burst int, now time.Time) *Limiter {
	l, err := New(Config{Mode: s.mode, Limit: limit, Burst: burst}, now)
	if err != nil {
		panic("limiter: shared keys: rate checked by NewSharedKeys: " + err.Error())
	}
	return l
}

// SharedKey is one key's limiter of a SharedKeys.
type SharedKey struct {
	keys     *SharedKeys
	redisKey string
	// local is the fallback limiter; own, under AtLimitEvery, the limiter
	// at Limit that gives the slots between calls (nil: none).
	local, own *Limiter

	mu sync.Mutex
	// next is when Redis last said the key's slot comes, and asked when
	// the key last called it.
	next, asked time.Time
	// rate is the key's rate as Redis last said (0: not heard yet). While
	// pending, set is the rate SetRate asks for, from the rate it moves
	// (the one last heard), and seq counts SetRate calls.
	rate      float64
	pending   bool
	set, from float64
	seq       uint64
	// lease holds the slots the last call leased (lease.slot maps them as
	// Shared's), used how many of them were taken, and size how many the
	// next call leases (0: the full size).
	lease      lease
	used, size int
}

// A key's lease is keyLeaseSlots slots, or keyLeaseSpan of its schedule
// where that is fewer: half the pipeline's, since a key's lease is taken
// at its lane's turns (see SharedKeys). keyCatchUp is how late a key's
// leased slot may still be taken: a lease's span.
const (
	keyLeaseSlots = 10
	keyLeaseSpan  = 10 * time.Millisecond
	keyCatchUp    = keyLeaseSpan
)

// takeLocked takes the key's next leased slot if it has come by now, and
// reports whether it did, and whether the lease still holds one to wait
// for. A slot more than keyCatchUp past is let pass. A lease run out sets
// the size of the next: one more if it was all used, else as many as it
// used. It requires that k.mu is held.
func (k *SharedKey) takeLocked(now time.Time) (taken, waiting bool) {
	l := &k.lease
	for l.next < l.n {
		at := l.slot(l.next)
		if at.After(now) {
			return false, true
		}
		l.next++
		if now.Sub(at) <= keyCatchUp {
			k.used++
			return true, false
		}
		k.keys.unused.Add(1)
	}
	if l.n > 0 {
		k.size = max(k.used, 1) // some passed: as many as it used
		if k.used == l.n {
			k.size++ // all used: one more
		}
		l.n = 0 // counted once
	}
	return false, false
}

// dropLeaseLocked gives up the rest of the lease, counting it as unused.
// It requires that k.mu is held.
func (k *SharedKey) dropLeaseLocked() {
	if n := k.lease.n - k.lease.next; n > 0 {
		k.keys.unused.Add(int64(n))
	}
	k.lease = lease{}
}

// leaseLocked returns how many slots a call leases at rate, and how long
// before its time the first may be leased (see SharedKeys). It requires
// that k.mu is held.
func (k *SharedKey) leaseLocked(rate float64) (want int, ahead time.Duration) {
	full := int(min(math.Ceil(rate*keyLeaseSpan.Seconds()), keyLeaseSlots))
	if k.own != nil && rate >= k.keys.ceiling() || full <= 1 {
		return 1, 0
	}
	want = full
	if k.size > 0 {
		want = min(k.size, full)
	}
	return want, keyLeaseSpan
}

// Next returns when the key's slot comes, as the last Allow heard from
// Redis (now, if that time has passed or none was heard), or from the
// fallback limiter while Redis fails. It makes no Redis call.
func (k *SharedKey) Next(now time.Time) time.Time {
	if k.keys.fallen() {
		return k.local.Next(now)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ownTurnLocked(now) {
		return k.own.Next(now)
	}
	if l := &k.lease; l.next < l.n {
		return later(now, l.slot(l.next))
	}
	return later(now, k.next)
}

// ownTurnLocked reports whether the slot at now comes from the key's own
// limiter at Limit, with no Redis call: under AtLimitEvery, while the rate
// heard is Limit, no SetRate waits and the last call is recent. It keeps
// the own limiter at the ceiling in force. It requires that k.mu is held.
func (k *SharedKey) ownTurnLocked(now time.Time) bool {
	s := k.keys
	if k.own == nil || k.pending || now.Sub(k.asked) >= s.atLimit {
		return false
	}
	ceiling := s.ceiling()
	if k.rate < ceiling {
		return false
	}
	if k.own.Limit(now) != ceiling {
		k.own.SetRate(ceiling, s.burst)
	}
	return true
}

// Allow takes the key's next slot if it has come by now, for every
// replica, and reports whether it did; when it has not, Next tells when it
// comes. A slot comes from the key's lease on this replica, and with the
// lease used up from a call to Redis, which may lease more (see
// SharedKeys). Allow waits for Redis at most Timeout, and carries a
// SetRate made since the last call. While Redis fails the fallback limiter
// answers.
func (k *SharedKey) Allow(now time.Time) bool {
	s := k.keys
	if !s.tryRedis(now) {
		return k.local.Allow(now)
	}
	k.mu.Lock()
	if k.ownTurnLocked(now) {
		k.mu.Unlock()
		ok := k.own.Allow(now)
		if ok {
			k.local.Allow(now)
		}
		return ok
	}
	if taken, waiting := k.takeLocked(now); taken || waiting {
		k.mu.Unlock()
		if taken {
			k.tookSlot(now)
		}
		return taken
	}
	ceiling := s.ceiling()
	rate, from, seq := min(k.rate, ceiling), "", k.seq
	if rate == 0 {
		rate = ceiling
	}
	if k.pending {
		rate, from = k.set, strconv.FormatFloat(k.from, 'g', -1, 64)
	}
	want, ahead := k.leaseLocked(rate)
	k.asked = now
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	start := time.Now()
	vals, err := keysScript.Run(ctx, s.client, []string{k.redisKey},
		strconv.FormatFloat(ceiling, 'g', -1, 64), s.burst, s.modeArg, strconv.FormatFloat(rate, 'g', -1, 64), from,
		want, ahead.Microseconds()).Slice()
	cancel()
	took := time.Since(start)
	r, err := parseKeyReply(vals, err)
	if err == nil && took > s.timeout {
		err = fmt.Errorf("redis at %s answered after %v, past the timeout %v", s.target, took.Round(time.Millisecond), s.timeout)
	}
	if err != nil {
		s.failed(now, err)
		return k.local.Allow(now)
	}
	s.answered(now)
	// The reply's times count from the server's now, which came somewhere
	// within the call: mapped from its end, no slot goes before its time.
	arrived := now.Add(took)
	k.mu.Lock()
	k.rate = r.limit
	if k.pending && k.seq == seq {
		k.pending = false
	}
	next := r.wait
	if r.n == 0 {
		next = max(r.first-ahead, 0) // back once the slot is due within a lease's span, to lease it
	}
	k.next = arrived.Add(next)
	k.lease, k.used = lease{at: arrived, off: float64(r.first) / 1e3, interval: 1e6 / r.limit, n: r.n}, 0
	if took > keyCatchUp && r.n > 1 {
		// A reply this slow would place the lease late, onto slots of
		// the leases after it: only its first slot is kept.
		k.keys.unused.Add(int64(r.n - 1))
		k.lease.n = 1
	}
	taken := false
	if r.n > 0 && r.first <= 0 {
		k.lease.next, k.used, taken = 1, 1, true // the first slot has come: it is this caller's
	}
	k.mu.Unlock()
	k.syncLocal(r.limit)
	if taken {
		k.tookSlot(now)
	}
	return taken
}

// tookSlot keeps the fallback limiter, and the own one, going on from a
// slot of the shared limit taken at now.
func (k *SharedKey) tookSlot(now time.Time) {
	k.local.Allow(now) // the fallback, if it comes, goes on from here
	if k.own != nil {
		k.own.Allow(now)
	}
}

// SetRate sets the key's rate for every replica: the next Allow carries it
// to Redis, which keeps it unless it is a rise and another replica moved
// the rate meanwhile (see SharedKeys). The rate is capped at Limit, and
// burst is the configured one: only the rate moves. While Redis fails,
// only a rate below the limit in force (the fallback's) is kept to carry.
func (k *SharedKey) SetRate(limit float64, _ int) {
	if ValidateRate(limit, 1) != nil {
		return
	}
	ceiling := k.keys.ceiling()
	limit = min(limit, ceiling)
	if k.keys.fallen() && limit >= k.Limit(time.Time{}) {
		// A rise from the limit in force while Redis fails, which the
		// fallback caps: it says nothing of the key's shared rate, and
		// carried, it could lower it.
		return
	}
	k.mu.Lock()
	if !k.pending && limit == k.rate {
		k.mu.Unlock() // nothing to carry: the key's call stays spared
		return
	}
	if !k.pending {
		k.from = k.rate
		if k.from == 0 {
			k.from = ceiling
		}
	}
	k.pending, k.set = true, limit
	k.seq++
	k.dropLeaseLocked()
	k.mu.Unlock()
	k.syncLocal(limit)
}

// syncLocal keeps the fallback limiter at the key's rate when that is
// below the fallback limit.
func (k *SharedKey) syncLocal(rate float64) {
	s := k.keys
	if want := min(rate, s.fallback); want != k.local.Limit(time.Time{}) {
		k.local.SetRate(want, s.fallbackBurst())
	}
}

// Limit returns the key's limit in force at now: the rate a SetRate asked
// for while it waits to be carried, else the one Redis last said (Limit
// before any answer); while Redis fails, the fallback's, never above it.
func (k *SharedKey) Limit(now time.Time) float64 {
	k.mu.Lock()
	rate := k.rate
	if k.pending {
		rate = k.set
	}
	k.mu.Unlock()
	ceiling := k.keys.ceiling()
	if rate == 0 || rate > ceiling {
		rate = ceiling
	}
	if k.keys.fallen() {
		return min(rate, k.keys.fallback)
	}
	return rate
}

// SetCeiling changes the most the rate of any key of k's SharedKeys may
// be, on this replica, from now on: the pipeline's limit that a
// destination's rate sits under, changed at run time. A key's rate above a
// lower ceiling counts as the ceiling; a key at the old ceiling stays
// there until SetRate raises it. Other replicas keep their own ceilings;
// Redis holds a key's rate, and each replica caps it with its own.
// SetCeiling ignores a limit that is not a finite number > 0.
func (k *SharedKey) SetCeiling(limit float64) {
	if ValidateRate(limit, 1) != nil {
		return
	}
	s := k.keys
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = limit
}

// ceiling returns the most any key's rate may be.
func (s *SharedKeys) ceiling() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// fallen reports whether Redis failed and has not answered since.
func (s *SharedKeys) fallen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down.IsZero()
}

// tryRedis reports whether a caller at now may call Redis: always while
// it answers, once per pause while it fails (the caller that gets true
// moves the next try on).
func (s *SharedKeys) tryRedis(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.IsZero() {
		return true
	}
	if now.Before(s.retry) {
		return false
	}
	s.retry = now.Add(probePause())
	return true
}

func (s *SharedKeys) failed(now time.Time, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.IsZero() {
		s.down = now
		s.log.Warn("shared per-key limits: redis failed; each key falls back to its own local limit",
			"prefix", s.prefix, "redis", s.target, "fallback_limit", s.fallback, "err", err)
	}
	s.retry = now.Add(probePause())
}

func (s *SharedKeys) answered(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down.IsZero() {
		s.log.Info("shared per-key limits: redis answers again", "prefix", s.prefix, "fallback_for", now.Sub(s.down).Round(time.Millisecond))
		s.down, s.retry = time.Time{}, time.Time{}
	}
}

// probePause is how long Redis is left alone after a failure: drawn in
// [probeGapMin, probeGapMax), so replicas drift apart.
func probePause() time.Duration {
	return probeGapMin + time.Duration(rand.Int64N(int64(probeGapMax-probeGapMin)))
}

// keyReply is keys.lua's reply: n slots leased, the first of them (or,
// with none, the next slot) first from the server's now, the slot after
// them wait from it, and the key's rate in force.
type keyReply struct {
	n           int
	first, wait time.Duration
	limit       float64
}

// parseKeyReply decodes keys.lua's reply.
func parseKeyReply(vals []any, err error) (keyReply, error) {
	if err != nil {
		return keyReply{}, err
	}
	bad := fmt.Errorf("unexpected script reply %v", vals)
	if len(vals) != 4 {
		return keyReply{}, bad
	}
	n, ok := vals[0].(int64)
	var f [3]float64
	for i := range f {
		str, isStr := vals[i+1].(string)
		v, perr := strconv.ParseFloat(str, 64)
		if !isStr || perr != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return keyReply{}, bad
		}
		f[i] = v
	}
	if !ok || n < 0 || n > maxLease || f[1] < 0 || !(f[2] > 0) {
		return keyReply{}, bad
	}
	us := func(v float64) time.Duration { return time.Duration(math.Ceil(v * 1e3)) }
	return keyReply{n: int(n), first: us(f[0]), wait: us(f[1]), limit: f[2]}, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
