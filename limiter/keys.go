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
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed keys.lua
var keysLua string

var keysScript = redis.NewScript(keysLua)

// SharedKeys holds each key's own limit (a pipeline's rate.per_key, or
// each destination's adaptive limit) in Redis, one hash per key under a
// common prefix, so that every replica with the same prefix holds a key to
// one limit together. Unlike Shared it leases nothing: a pipeline takes a
// key's slot only at the moment it sends, after its other key's turns and
// the pipeline's own limit, so a slot leased ahead would mostly come too
// late to use. Each Allow is one Redis call, made by the caller, and Next
// answers from what the last call said, without one.
//
// Each key's rate lives in its hash beside its state, and every call uses
// the one stored there: Limit at first, and after a SetRate on any
// replica, the rate it set. SetRate makes no call of its own: the next
// Allow carries the new rate, and every Allow's answer brings back the
// rate in force, so the other replicas take it at their next Allow. A
// lower rate always wins; a higher one is written only while the key
// still holds the rate it was computed from, so that a rise computed from
// a rate already stale never undoes another replica's decrease. A rate
// never exceeds Limit, or the ceiling SetCeiling set since. A key expires
// as its state does (once idle for a full refill and a second); the next
// caller writes the rate it last heard, so a rate set lives as long as
// some replica remembers it.
//
// With AtLimitEvery, a key whose rate is Limit and that has no SetRate to
// carry calls Redis at most once per AtLimitEvery and otherwise takes its
// slots from a limiter of its own at Limit, on this replica: for keys whose
// Limit another shared limit already holds (a destination's ceiling under
// the pipeline's rate.limit), so that only a key whose rate was lowered
// costs a Redis call per slot.
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

// Allow takes the key's slot in Redis if it has come by now, for every
// replica, and reports whether it did; when it has not, Next tells when it
// comes. It waits for Redis at most Timeout, and carries a SetRate made
// since the last call. While Redis fails the fallback limiter answers.
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
	ceiling := s.ceiling()
	rate, from, seq := min(k.rate, ceiling), "", k.seq
	if rate == 0 {
		rate = ceiling
	}
	if k.pending {
		rate, from = k.set, strconv.FormatFloat(k.from, 'g', -1, 64)
	}
	k.asked = now
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	start := time.Now()
	vals, err := keysScript.Run(ctx, s.client, []string{k.redisKey},
		strconv.FormatFloat(ceiling, 'g', -1, 64), s.burst, s.modeArg, strconv.FormatFloat(rate, 'g', -1, 64), from).Slice()
	cancel()
	ok, wait, limit, err := parseKeyReply(vals, err)
	if err == nil && time.Since(start) > s.timeout {
		err = fmt.Errorf("redis at %s answered after %v, past the timeout %v", s.target, time.Since(start).Round(time.Millisecond), s.timeout)
	}
	if err != nil {
		s.failed(now, err)
		return k.local.Allow(now)
	}
	s.answered(now)
	k.mu.Lock()
	k.next, k.rate = now.Add(wait), limit
	if k.pending && k.seq == seq {
		k.pending = false
	}
	k.mu.Unlock()
	k.syncLocal(limit)
	if ok {
		k.local.Allow(now) // the fallback, if it comes, goes on from here
		if k.own != nil {
			k.own.Allow(now)
		}
	}
	return ok
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

// parseKeyReply decodes keys.lua's reply.
func parseKeyReply(vals []any, err error) (ok bool, wait time.Duration, limit float64, _ error) {
	if err != nil {
		return false, 0, 0, err
	}
	if len(vals) != 3 {
		return false, 0, 0, fmt.Errorf("unexpected script reply %v", vals)
	}
	taken, ok1 := vals[0].(int64)
	str, ok2 := vals[1].(string)
	lim, ok3 := vals[2].(string)
	us, perr := strconv.ParseFloat(str, 64)
	limit, lerr := strconv.ParseFloat(lim, 64)
	if !ok1 || !ok2 || !ok3 || perr != nil || lerr != nil || !(us >= 0) || math.IsInf(us, 0) || !(limit > 0) || math.IsInf(limit, 0) {
		return false, 0, 0, fmt.Errorf("unexpected script reply %v", vals)
	}
	return taken == 1, time.Duration(math.Ceil(us * 1e3)), limit, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
