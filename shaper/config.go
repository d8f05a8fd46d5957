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
	// Delivery is how the dispatcher treats the sink.
	Delivery DeliveryConfig
}

// BucketConfig configures the bounded leaky bucket.
type BucketConfig struct {
	// Capacity is the most messages held at once (queued, waiting for a
	// retry, or in flight). When full, the source stops fetching. It is also
	// held to limit × max_queue_time. Default 1000.
	Capacity int `yaml:"capacity"`
	// MaxQueueTime is the longest a message may wait in the bucket before its
	// departure. Default 5s.
	MaxQueueTime time.Duration `yaml:"max_queue_time"`
	// OnExpire is what happens to a message that would wait longer:
	// dead_letter (default), drop (ack without delivery), or deliver (send late).
	OnExpire string `yaml:"on_expire"`
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
}

// DeliveryConfig is how the dispatcher treats a sink: concurrency, the
// per-attempt timeout and retries. In a config file each sink carries it
// among its own keys (sink.http.timeout).
type DeliveryConfig struct {
	// Timeout bounds each attempt. Default 2s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxInFlight is the most attempts outstanding at once. Default 8.
	MaxInFlight int `yaml:"max_in_flight"`
	// Retry is the retry policy.
	Retry RetryConfig `yaml:"retry"`
}

// RetryConfig configures retries of retryable failures.
type RetryConfig struct {
	// MaxAttempts counts every attempt, the first included. Default 5.
	MaxAttempts int `yaml:"max_attempts"`
	// InitialBackoff is the upper bound of the first backoff (full jitter:
	// the wait is uniform in [0, bound]). Default 200ms.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps every backoff, and a Retry-After. Default 30s.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxElapsed bounds a task from its first attempt to its last. Default 10m.
	MaxElapsed time.Duration `yaml:"max_elapsed"`
}
