// Package shaper is the core of the shaper daemon: it moves messages from a
// Source through a bounded bucket to a Sink at the rate a Limiter gives, and
// settles every message with its source only once its outcome is final.
//
// The package knows no concrete broker or endpoint. It owns the contracts
// (Message, Receipt, Source, Sink, Limiter) that packages sources, sinks and
// limiter implement, and everything between them:
//
//   - config.go, validate.go: the core's own config (PipelineConfig: the
//     bucket, the rate and the delivery settings), its defaults and its
//     rules, each problem with its key path. The whole file, and every
//     part's keys, are package config's and the parts' own;
//   - bucket.go, lanes.go, keys.go: the bounded bucket and back-pressure:
//     one lane per key (key.from; one lane in all without it), each a FIFO
//     of new messages and a heap of retries, with its own limiter under
//     rate.per_key; lanes whose message is ready take turns in a ring, the
//     others wait in a heap by the time they are ready; a full lane pauses
//     its source (Pausable) or hands messages back;
//   - destinations.go: each destination's state in the bucket (the sink
//     names a message's destination, Destinations): its gate and, under
//     rate.adaptive, its own limit in force; and expiry on time of what
//     any lane holds. Lock order: bucket.mu, then a gate's mu;
//   - pushback.go: the operator's pause of the pipeline, each
//     destination's gate (a sink's Retry-After and the circuit breaker)
//     and the adaptive rate;
//   - pipeline.go: fetcher (in batches of limit × 50 ms), scheduler (its
//     decision for the task it holds is plan: wait for the slot, wait
//     out a pause, or expire), expiry on time, attempts (each on a worker,
//     which hands it to Sink.Send: how the request is written is the
//     sink's business), expiry, dead letters, acks and the graceful drain
//     — the whole life of a message, top to bottom;
//   - sleep.go: the Clock a pipeline runs on (Parts.Clock: a SystemClock on
//     Go timers by default, fleet.NewClock's in the daemon (package
//     tuning's alarms), a
//     testing/synctest one in the scheduler tests) and departures on time:
//     the scheduler waits on an Alarm, which a rate change or a hold
//     rings; semaphore.go: max_in_flight, resizable by a reload;
//   - retry.go: the retry policy (backoff with full jitter, Retry-After,
//     retryable and permanent statuses);
//   - metrics.go, status.go, recent.go, admin.go: Prometheus metrics,
//     pipeline status and state (stalled when more expires than is sent),
//     run-time rate changes (and Reconfigure, for a reload) and the admin
//     HTTP API, whose changes need the token.
//
// A program wires a pipeline by building its parts and calling New with a
// PipelineConfig, then Run; cmd/shaper does exactly that, from a
// config.Pipeline (whose Core is the PipelineConfig).
package shaper
