package shaper

import (
	"cmp"
	"crypto/sha256"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/check"
)

// Defaults of the core's config, in one place. Field comments in config.go
// repeat them.
const (
	DefaultCapacity       = 1000
	DefaultMaxQueueTime   = 5 * time.Second
	DefaultTimeout        = 2 * time.Second
	DefaultMaxInFlight    = 8
	DefaultMaxAttempts    = 5
	DefaultInitialBackoff = 200 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultMaxElapsed     = 10 * time.Minute

	DefaultBreakerFailures = 5
	DefaultBreakerWindow   = 500 * time.Millisecond
	DefaultBreakerOpenFor  = time.Second
	DefaultBreakerMaxOpen  = 2 * time.Second

	DefaultAdaptiveMin      = 5.0
	DefaultAdaptiveDecrease = 0.8
	DefaultAdaptiveIncrease = 2.0
)

// Bounds of the core's config. Beyond them a value is a slip (a capacity
// of 9223372036854775807, a max_queue_time of 2562047h) rather than a
// plan, and times computed from it (a deadline, a backoff doubled up to
// max_backoff) would overflow.
const (
	// MaxCapacity is the highest bucket.capacity: ten million messages,
	// gigabytes of payload held at once.
	MaxCapacity = 10_000_000
	// MaxDuration is the longest bucket.max_queue_time, retry.max_elapsed
	// and retry.max_backoff: seven days.
	MaxDuration = 7 * 24 * time.Hour
)

// DefaultMaxKeys is key.max_keys's default.
const DefaultMaxKeys = 100_000

// key.max_length: its default and bounds. The least is the length of the
// form a longer key takes ("sha256:" and 64 hex digits), so that no key
// grows; the most keeps a lane and the admin API's answer small.
const (
	DefaultMaxKeyLength = 256
	MinKeyLength        = len(hashedKeyPrefix) + 2*sha256.Size
	MaxKeyLength        = 4096
)

// SetDefaults fills every field left out with its default.
func (k *KeyConfig) SetDefaults() {
	k.MaxKeys = cmp.Or(k.MaxKeys, DefaultMaxKeys)
	k.MaxLength = cmp.Or(k.MaxLength, DefaultMaxKeyLength)
}

// Validate reports every problem of a defaulted k at key path path.
func (k *KeyConfig) Validate(path string) error {
	var ps check.Problems
	switch {
	case k.From == "":
		ps.Add(path+".from", "required: header:NAME, kafka_key, json:a.b.c or host")
	case k.From == "kafka_key":
	case k.From == "host":
		if k.URLFrom == "" {
			ps.Add(path+".from", "host needs sink.http.url_from: the host of the URL each message names")
		}
	case !ValidField(k.From):
		ps.Add(path+".from", "want header:NAME, kafka_key, json:a.b.c (a dot path) or host, got %q", k.From)
	}
	if k.MaxKeys < 1 {
		ps.Add(path+".max_keys", "must be >= 1, got %d", k.MaxKeys)
	}
	switch {
	case k.MaxLength < MinKeyLength || k.MaxLength > MaxKeyLength:
		ps.Add(path+".max_length", "must be from %d to %d bytes, got %d", MinKeyLength, MaxKeyLength, k.MaxLength)
	case len(k.Missing) > k.MaxLength:
		ps.Add(path+".missing", "must be at most max_length (%d bytes), got %d bytes", k.MaxLength, len(k.Missing))
	}
	return ps.Err()
}

// ValidField reports whether from names a header (header:NAME) or a JSON
// path (json:a.b.c) for Field.
func ValidField(from string) bool {
	kind, arg, _ := strings.Cut(from, ":")
	switch kind {
	case "header":
		return arg != "" && !strings.ContainsAny(arg, " \t\r\n:")
	case "json":
		return arg != "" && !slices.Contains(strings.Split(arg, "."), "")
	}
	return false
}

// SetDefaults fills every field left out with its default.
func (p *PipelineConfig) SetDefaults() {
	if p.Key != nil {
		p.Key.SetDefaults()
	}
	p.Bucket.SetDefaults()
	p.Rate.SetDefaults()
	p.Delivery.SetDefaults()
}

// SetDefaults fills every field left out with its default.
func (b *BucketConfig) SetDefaults() {
	b.Capacity = cmp.Or(b.Capacity, DefaultCapacity)
	b.MaxQueueTime = cmp.Or(b.MaxQueueTime, DefaultMaxQueueTime)
	b.OnExpire = cmp.Or(b.OnExpire, OnExpireDeadLetter)
	b.PerKeyCapacity = cmp.Or(b.PerKeyCapacity, b.Capacity)
}

// SetDefaults fills every field left out with its default.
func (r *RateConfig) SetDefaults() {
	r.Mode = cmp.Or(r.Mode, ModeLeaky)
	if r.Burst == nil {
		burst := 1
		if r.Mode == ModeToken && r.Limit > 1 {
			burst = int(math.Min(r.Limit, math.MaxInt32))
		}
		r.Burst = &burst
	}
	if k := r.PerKey; k != nil && k.Burst == nil {
		burst := 1
		if r.Mode == ModeToken && k.Limit > 1 {
			burst = int(math.Min(k.Limit, math.MaxInt32))
		}
		k.Burst = &burst
	}
	if a := r.Adaptive; a != nil {
		a.Min = cmp.Or(a.Min, math.Min(DefaultAdaptiveMin, r.Limit))
		a.Decrease = cmp.Or(a.Decrease, DefaultAdaptiveDecrease)
		a.Increase = cmp.Or(a.Increase, DefaultAdaptiveIncrease)
	}
}

// SetDefaults fills every field left out with its default.
func (d *DeliveryConfig) SetDefaults() {
	d.Timeout = cmp.Or(d.Timeout, DefaultTimeout)
	d.MaxInFlight = cmp.Or(d.MaxInFlight, DefaultMaxInFlight)
	r := &d.Retry
	r.MaxAttempts = cmp.Or(r.MaxAttempts, DefaultMaxAttempts)
	r.InitialBackoff = cmp.Or(r.InitialBackoff, DefaultInitialBackoff)
	r.MaxBackoff = cmp.Or(r.MaxBackoff, max(DefaultMaxBackoff, r.InitialBackoff))
	r.MaxElapsed = cmp.Or(r.MaxElapsed, DefaultMaxElapsed)
	b := &d.Breaker
	if b.Failures == nil {
		failures := DefaultBreakerFailures
		b.Failures = &failures
	}
	b.Window = cmp.Or(b.Window, DefaultBreakerWindow)
	b.OpenFor = cmp.Or(b.OpenFor, DefaultBreakerOpenFor)
	b.MaxOpen = cmp.Or(b.MaxOpen, max(DefaultBreakerMaxOpen, b.OpenFor))
}

var pipelineName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ValidateName reports a pipeline name that is missing or has characters
// other than letters, digits, '-', '_' and '.', at key path path.
func ValidateName(path, name string) error {
	var ps check.Problems
	switch {
	case name == "":
		ps.Add(path, "required")
	case !pipelineName.MatchString(name):
		ps.Add(path, "want letters, digits, '-', '_' or '.', got %q", name)
	}
	return ps.Err()
}

// Validate reports every problem of a defaulted b at key path path.
func (b BucketConfig) Validate(path string) error {
	var ps check.Problems
	switch {
	case b.Capacity < 1:
		ps.Add(path+".capacity", "must be >= 1, got %d", b.Capacity)
	case b.Capacity > MaxCapacity:
		ps.Add(path+".capacity", "must be at most %d, got %d", MaxCapacity, b.Capacity)
	}
	ps.Positive(path+".max_queue_time", b.MaxQueueTime)
	atMostMaxDuration(path+".max_queue_time", b.MaxQueueTime, &ps)
	switch b.OnExpire {
	case OnExpireDeadLetter, OnExpireDrop, OnExpireDeliver:
	default:
		ps.Add(path+".on_expire", "want dead_letter, drop or deliver, got %q", b.OnExpire)
	}
	if b.Capacity >= 1 && b.Capacity <= MaxCapacity && (b.PerKeyCapacity < 1 || b.PerKeyCapacity > b.Capacity) {
		ps.Add(path+".per_key_capacity", "must be >= 1 and <= capacity (%d), got %d", b.Capacity, b.PerKeyCapacity)
	}
	return ps.Err()
}

// Validate reports every problem of a defaulted r at key path path, against
// the bucket's max_queue_time.
func (r RateConfig) Validate(path string, maxQueueTime time.Duration) error {
	var ps check.Problems
	switch r.Mode {
	case ModeLeaky, ModeToken:
	default:
		ps.Add(path+".mode", "want leaky or token, got %q", r.Mode)
	}
	validateRate(path, r.Mode, r.Limit, r.Burst, maxQueueTime, &ps)
	if k := r.PerKey; k != nil {
		validateRate(path+".per_key", r.Mode, k.Limit, k.Burst, maxQueueTime, &ps)
	}
	if r.Warmup < 0 {
		ps.Add(path+".warmup", "must be >= 0, got %s", r.Warmup)
	}
	if a := r.Adaptive; a != nil {
		ap := path + ".adaptive"
		switch {
		case !(a.Min > 0) || math.IsInf(a.Min, 0):
			ps.Add(ap+".min", "must be a number > 0, got %v", a.Min)
		case a.Min > r.Limit:
			ps.Add(ap+".min", "must be <= rate.limit (%v), got %v", r.Limit, a.Min)
		case maxQueueTime > 0 && a.Min*maxQueueTime.Seconds() < 1:
			ps.Add(ap+".min", "must be >= %g, got %v: at a lower rate not one message can leave within bucket.max_queue_time (%s)",
				1/maxQueueTime.Seconds(), a.Min, maxQueueTime)
		}
		if !(a.Decrease > 0 && a.Decrease < 1) {
			ps.Add(ap+".decrease", "must be above 0 and below 1, got %v", a.Decrease)
		}
		if !(a.Increase > 0) || math.IsInf(a.Increase, 0) {
			ps.Add(ap+".increase", "must be a number > 0, got %v", a.Increase)
		}
		if a.LatencyTarget < 0 {
			ps.Add(ap+".latency_target", "must be >= 0, got %s", a.LatencyTarget)
		}
	}
	return ps.Err()
}

// MaxLimit is the highest rate.limit accepted, in requests per second: one
// request per microsecond, far above what one sink takes.
const MaxLimit = 1e6

// validateRate checks a rate's limit and burst (nil: left out) in mode,
// against the bucket's max_queue_time: the one set of rules for a config
// file and for a change through the admin API. path is where the rate is
// (pipelines[0].rate).
func validateRate(path, mode string, limit float64, burst *int, maxQueueTime time.Duration, ps *check.Problems) {
	switch {
	case !(limit > 0) || math.IsInf(limit, 0):
		ps.Add(path+".limit", "must be a number > 0, got %v", limit)
	case limit > MaxLimit:
		ps.Add(path+".limit", "must be <= %g (one request per microsecond), got %v", MaxLimit, limit)
	case maxQueueTime > 0 && limit*maxQueueTime.Seconds() < 1:
		ps.Add(path+".limit", "must be >= %g, got %v: at a lower rate not one message can leave within bucket.max_queue_time (%s), "+
			"so every message would expire; raise max_queue_time or the limit", 1/maxQueueTime.Seconds(), limit, maxQueueTime)
	}
	switch {
	case burst == nil:
	case *burst < 1:
		ps.Add(path+".burst", "must be >= 1, got %d", *burst)
	case *burst > 1 && mode == ModeLeaky:
		ps.Add(path+".burst", "leaky mode never bursts: leave burst out or use mode: token, got %d", *burst)
	}
}

// Validate reports every problem of a defaulted d at key path path, where
// its keys are (a sink's: pipelines[0].sink.http).
func (d DeliveryConfig) Validate(path string) error {
	var ps check.Problems
	ps.Positive(path+".timeout", d.Timeout)
	if d.MaxInFlight < 1 {
		ps.Add(path+".max_in_flight", "must be >= 1, got %d", d.MaxInFlight)
	}
	r, rp := d.Retry, path+".retry"
	if r.MaxAttempts < 1 {
		ps.Add(rp+".max_attempts", "must be >= 1, got %d", r.MaxAttempts)
	}
	ps.Positive(rp+".initial_backoff", r.InitialBackoff)
	if r.MaxBackoff < r.InitialBackoff {
		ps.Add(rp+".max_backoff", "must be >= initial_backoff (%s), got %s", r.InitialBackoff, r.MaxBackoff)
	}
	atMostMaxDuration(rp+".max_backoff", r.MaxBackoff, &ps)
	ps.Positive(rp+".max_elapsed", r.MaxElapsed)
	atMostMaxDuration(rp+".max_elapsed", r.MaxElapsed, &ps)
	b, bp := d.Breaker, path+".breaker"
	if b.Failures != nil && *b.Failures < 0 {
		ps.Add(bp+".failures", "must be >= 0 (0 turns the breaker off), got %d", *b.Failures)
	}
	if b.Window < 0 {
		ps.Add(bp+".window", "must be >= 0, got %s", b.Window)
	}
	ps.Positive(bp+".open_for", b.OpenFor)
	if b.MaxOpen < b.OpenFor {
		ps.Add(bp+".max_open", "must be >= open_for (%s), got %s", b.OpenFor, b.MaxOpen)
	}
	return ps.Err()
}

// atMostMaxDuration reports d, the value at key path path, when it is
// longer than MaxDuration.
func atMostMaxDuration(path string, d time.Duration, ps *check.Problems) {
	if d > MaxDuration {
		ps.Add(path, "must be at most %s (7 days), got %s", MaxDuration, d)
	}
}
