package shaper

import "time"

// PipelineConfig is what the core of one pipeline needs: its name, the
// bucket, the rate and how to treat the sink. The source, the sink and the
// limiter come configured and built as Parts; package config composes the
// whole file.
type PipelineConfig struct {
	// Name labels the pipeline's metrics and its admin API path. Required,
	// unique, letters, digits, '-', '_' and '.'.
	Name string
	// Bucket bounds how many messages wait and for how long.
	Bucket BucketConfig
	// Rate is how fast messages leave the bucket.
	Rate RateConfig
	// Delivery is how the pipeline's attempts treat the sink.
	Delivery DeliveryConfig
	// Key, when set, gives each message a key, and each key a lane of the
	// bucket; lanes take turns. Nil: one lane.
	Key *KeyConfig
	// Pushback is what a push-back from the sink holds back.
	Pushback PushbackConfig
}

// PushbackConfig is the scope of push-back (pushback:): what one
// Retry-After pause, one circuit breaker and one adaptive limit act on.
type PushbackConfig struct {
	// Scope is destination (default: the origin of the request's URL, one
	// for a fixed url, one per host with url_from) or key (each key's
	// lane: one API that enforces a quota per tenant; needs key:).
	Scope string `yaml:"scope"`
}

// Values of PushbackConfig.Scope.
const (
	ScopeDestination = "destination"
	ScopeKey         = "key"
)

// KeyConfig selects each message's key (key:), and so its lane.
type KeyConfig struct {
	// From is where the key is: header:NAME (a message header, the first
	// value), kafka_key (the Kafka record key), json:a.b.c (a dot path
	// into a JSON object payload; a string is the key as it is, a number
	// or a boolean its JSON text), or host (the host of the URL the
	// message names, with sink.http.url_from). Required.
	From string `yaml:"from"`
	// Missing is the key of a message without one; they share its lane.
	// Default "".
	Missing string `yaml:"missing"`
	// MaxKeys bounds the lanes held at once; beyond it, messages of a new
	// key go to the "" lane and are counted (shaper_key_overflow_total).
	// Default 100000.
	MaxKeys int `yaml:"max_keys"`
	// MaxLength is the longest key kept as it is, in bytes. A longer key
	// is replaced by "sha256:" and the hex of its SHA-256 (71 bytes) where
	// it is read, so lanes, per-key limits, logs and the admin API hold
	// that form, and a key always maps to the same lane. From 71 (the
	// length of the replacement) to 4096; default 256.
	MaxLength int `yaml:"max_length"`
	// URLFrom is where the message's URL is (sink.http.url_from), for
	// From "host": the key is that URL's host. Set by the config package,
	// not a key of the file.
	URLFrom string `yaml:"-"`
	// MaxInFlight bounds one key's requests in flight (0: no bound):
	// sink.http.max_in_flight_per_host with From "host", so that a slow
	// host holds no more of max_in_flight than that and the others go on.
	// Set by the config package, not a key of the file.
	MaxInFlight int `yaml:"-"`
	// Ordered sends a key's messages in source order, one at a time: the
	// next waits until the one before is settled (a retry waits too, and
	// holds back only its own key). Default false.
	Ordered bool `yaml:"ordered"`
}

// BucketConfig configures the bounded leaky bucket.
type BucketConfig struct {
	// Capacity is the most messages held at once (queued, waiting for a
	// retry, or in flight). When full, the source stops fetching. It is also
	// held to limit × max_queue_time. Default 1000. At most 10000000.
	Capacity int `yaml:"capacity"`
	// MaxQueueTime is the longest a message may wait in the bucket before its
	// departure. Default 5s. At most 168h (7 days).
	MaxQueueTime time.Duration `yaml:"max_queue_time"`
	// OnExpire is what happens to a message that would wait longer:
	// dead_letter (default), drop (ack without delivery), or deliver (send late).
	OnExpire string `yaml:"on_expire"`
	// PerKeyCapacity is the most messages one lane holds (a key, or with
	// url_from a destination). Further messages of a full lane are handed
	// back to the source to come again later, so that a destination that
	// pushes back, or a key's flood, leaves room for the others. Default:
	// a quarter of Capacity with key: or url_from where the source can take
	// messages back (Kafka, JetStream but for an ordered key), else
	// Capacity.
	PerKeyCapacity int `yaml:"per_key_capacity"`
}

// Modes of RateConfig.Mode.
const (
	ModeLeaky = "leaky"
	ModeToken = "token"
)

// Values of BucketConfig.OnExpire.
const (
	OnExpireDeadLetter = "dead_letter"
	OnExpireDrop       = "drop"
	OnExpireDeliver    = "deliver"
)

// RateConfig configures the limiter.
type RateConfig struct {
	// Mode is leaky (default: requests exactly 1/limit apart, never a burst)
	// or token (up to Burst at once after idle time, average Limit).
	Mode string `yaml:"mode"`
	// Limit is requests per second to the sink, retries included. Required;
	// fractions allowed (0.5 is one request every two seconds).
	Limit float64 `yaml:"limit"`
	// Burst is how many requests token mode lets go at once, >= 1. Left out:
	// 1 in leaky mode, one second's worth (Limit, at least 1) in token mode.
	Burst *int `yaml:"burst"`
	// Warmup ramps the limit from Limit/3 to Limit over this time after
	// start. Default 0 (no ramp).
	Warmup time.Duration `yaml:"warmup"`
	// Adaptive, when set, lowers the limit in force when the sink pushes
	// back and raises it again while it does not, between Adaptive.Min and
	// Limit. Left out: the limit stays Limit.
	Adaptive *AdaptiveConfig `yaml:"adaptive"`
	// PerKey, with key:, is each key's own limit under Limit, in Mode.
	// Left out: keys share Limit in turns, with no limit of their own.
	PerKey *PerKeyRate `yaml:"per_key"`
}

// PerKeyRate is each key's own limit (rate.per_key), in the pipeline's
// rate.mode.
type PerKeyRate struct {
	// Limit is requests per second for one key. Required.
	Limit float64 `yaml:"limit"`
	// Burst is as rate.burst, for one key. Default 1 in leaky mode, one
	// second's worth in token mode.
	Burst *int `yaml:"burst"`
}

// AdaptiveConfig is the adaptive rate (rate.adaptive): every push-back (a
// 429 or 503, or an attempt slower than LatencyTarget when that is > 0)
// multiplies the limit in force by Decrease, at most once per round trip
// and never below Min; while no push-back comes it rises, up to
// rate.limit: by Increase per second for the first two seconds after a
// push-back, then at a rate that grows fivefold each second (5×Increase,
// 25×Increase, ... per second) until the next push-back (with
// rate.shared, any replica's).
type AdaptiveConfig struct {
	// Min is the lowest limit it goes to. Default 5, or rate.limit when
	// that is lower.
	Min float64 `yaml:"min"`
	// Decrease multiplies the limit at a push-back: above 0, below 1.
	// Default 0.8.
	Decrease float64 `yaml:"decrease"`
	// Increase is how much the limit rises per second (in requests per
	// second) for the first two seconds after a push-back: > 0. Default 2.
	Increase float64 `yaml:"increase"`
	// LatencyTarget, when > 0, counts an attempt slower than it as a
	// push-back. Default 0 (latency is not watched).
	LatencyTarget time.Duration `yaml:"latency_target"`
}

// DeliveryConfig is how a pipeline's attempts treat a sink: concurrency, the
// per-attempt timeout and retries. In a config file each sink carries it
// among its own keys (sink.http.timeout).
type DeliveryConfig struct {
	// Timeout bounds each attempt. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight is the most attempts outstanding at once. Default 8.
	MaxInFlight int `yaml:"max_in_flight"`
	// Retry is the retry policy.
	Retry RetryConfig `yaml:"retry"`
	// Breaker stops departures while the sink fails every request.
	Breaker BreakerConfig `yaml:"breaker"`
}

// BreakerConfig is the circuit breaker of a sink (sink.http.breaker). It
// tells a sink that is down from one that is degraded: it opens once the
// sink has failed every request for Window, at least Failures of them in a
// row, with at most one success among its last 20 answers (a failure: a
// network error, a timeout, a 5xx, a 429 without a Retry-After still to
// come); any success closes it. While it is open, departures stop for
// OpenFor (plus up to a tenth at random); then one probe request goes: a
// success closes the breaker, a failure opens it again for twice as long,
// up to MaxOpen. While it is open, messages wait in the bucket and spend
// no attempts; max_queue_time still expires what waits too long.
type BreakerConfig struct {
	// Failures is the fewest retryable failures in a row that open the
	// breaker; those after them, until it opens, spend no attempt.
	// Default 5; 0 turns the breaker off.
	Failures *int `yaml:"failures"`
	// Window is how long the sink must have failed every request before
	// the breaker opens: long enough for the retries of a degraded sink's
	// failures to meet a success. Default 500ms.
	Window time.Duration `yaml:"window"`
	// OpenFor is how long it stays open the first time. Default 1s.
	OpenFor time.Duration `yaml:"open_for"`
	// MaxOpen caps how long it stays open after failed probes, and so how
	// late the rate is back after the sink is. Default 2s.
	MaxOpen time.Duration `yaml:"max_open"`
}

// RetryConfig configures retries of retryable failures.
type RetryConfig struct {
	// MaxAttempts counts every attempt, the first included. Default 5.
	MaxAttempts int `yaml:"max_attempts"`
	// InitialBackoff is the upper bound of the first backoff (full jitter:
	// the wait is uniform in [0, bound]). Default 200ms.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps every backoff, and a Retry-After. Default 30s. At most
	// 168h (7 days).
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxElapsed bounds a task from its first attempt to its last. Default
	// 10m. At most 168h (7 days).
	MaxElapsed time.Duration `yaml:"max_elapsed"`
}
