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

// SharedKeys holds each key's own limit (a pipeline's rate.per_key) in
// Redis, one hash per key under a common prefix, so that every replica
// with the same prefix holds a key to one limit together. Unlike Shared it
// leases nothing: a pipeline takes a key's slot only at the moment it
// sends, after its other key's turns and the pipeline's own limit, so a
// slot leased ahead would mostly come too late to use. Each Allow is one
// Redis call, made by the caller, and Next answers from what the last call
// said, without one.
//
// While Redis fails (an error, or no answer within Timeout), every key
// falls back to a limiter of its own at FallbackLimit, and the first
// Allow after a pause of 200-300ms tries Redis again: an outage costs one
// Timeout per pause, not one per request. SharedKeys has no goroutine; it
// is safe for simultaneous use.
type SharedKeys struct {
	client   redis.UniversalClient
	prefix   string
	target   string
	modeArg  string
	mode     Mode
	limit    float64
	burst    int
	fallback float64
	timeout  time.Duration
	log      *slog.Logger

	mu sync.Mutex
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
		limit: cfg.Limit, burst: cfg.Burst, fallback: cfg.FallbackLimit, timeout: cfg.Timeout, log: cfg.Logger,
	}
	if cfg.Mode == Token {
		s.modeArg = "1"
	}
	return s, nil
}

// For returns the limiter of key, starting at now.
func (s *SharedKeys) For(key string, now time.Time) *SharedKey {
	burst := 1 // the shared burst scaled as the limit is, as Shared's fallback
	if s.mode == Token {
		burst = max(1, int(float64(s.burst)*s.fallback/s.limit))
	}
	local, err := New(Config{Mode: s.mode, Limit: s.fallback, Burst: burst}, now)
	if err != nil {
		panic("limiter: shared keys: fallback rate checked by NewSharedKeys: " + err.Error())
	}
	return &SharedKey{keys: s, redisKey: s.prefix + key, local: local}
}

// SharedKey is one key's limiter of a SharedKeys.
type SharedKey struct {
	keys     *SharedKeys
	redisKey string
	local    *Limiter

	mu sync.Mutex
	// next is when Redis last said the key's slot comes.
	next time.Time
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
	return later(now, k.next)
}

// Allow takes the key's slot in Redis if it has come by now, for every
// replica, and reports whether it did; when it has not, Next tells when it
// comes. It waits for Redis at most Timeout. While Redis fails the
// fallback limiter answers.
func (k *SharedKey) Allow(now time.Time) bool {
	s := k.keys
	if !s.tryRedis(now) {
		return k.local.Allow(now)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	start := time.Now()
	vals, err := keysScript.Run(ctx, s.client, []string{k.redisKey},
		strconv.FormatFloat(s.limit, 'g', -1, 64), s.burst, s.modeArg).Slice()
	cancel()
	ok, wait, err := parseKeyReply(vals, err)
	if err == nil && time.Since(start) > s.timeout {
		err = fmt.Errorf("redis at %s answered after %v, past the timeout %v", s.target, time.Since(start).Round(time.Millisecond), s.timeout)
	}
	if err != nil {
		s.failed(now, err)
		return k.local.Allow(now)
	}
	s.answered(now)
	k.mu.Lock()
	k.next = now.Add(wait)
	k.mu.Unlock()
	if ok {
		k.local.Allow(now) // the fallback, if it comes, goes on from here
	}
	return ok
}

// SetRate is not supported: a key's limit changes with a new pipeline.
// It changes only the fallback limiter.
func (k *SharedKey) SetRate(limit float64, burst int) { k.local.SetRate(limit, burst) }

// Limit returns the key's limit in force at now: the shared one, or the
// fallback while Redis fails.
func (k *SharedKey) Limit(now time.Time) float64 {
	if k.keys.fallen() {
		return k.keys.fallback
	}
	return k.keys.limit
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
func parseKeyReply(vals []any, err error) (ok bool, wait time.Duration, _ error) {
	if err != nil {
		return false, 0, err
	}
	if len(vals) != 2 {
		return false, 0, fmt.Errorf("unexpected script reply %v", vals)
	}
	taken, ok1 := vals[0].(int64)
	str, ok2 := vals[1].(string)
	us, perr := strconv.ParseFloat(str, 64)
	if !ok1 || !ok2 || perr != nil || !(us >= 0) || math.IsInf(us, 0) {
		return false, 0, fmt.Errorf("unexpected script reply %v", vals)
	}
	return taken == 1, time.Duration(math.Ceil(us * 1e3)), nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
