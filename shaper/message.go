package shaper

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is one unit of work taken from a source. The pipeline owns it from
// the moment a Source returns it until its Receipt is settled, exactly once.
type Message struct {
	// ID is stable across redeliveries; the HTTP sink sends it as
	// Idempotency-Key so a sink can drop duplicates.
	ID string
	// Origin names where the message came from, for the Shaper-Source header
	// of a dead letter: "topic/partition/offset" or "stream/sequence".
	Origin string
	// Key is the broker's message key, if any.
	Key []byte
	// Header holds the broker's message headers, if any. Sinks may forward them.
	Header map[string][]string
	// Payload is the body, passed to the sink unchanged.
	Payload []byte
	// Attempts is how many attempts were made before the message came to
	// this source: a dead letter's Shaper-Attempts when a dead-letter
	// record is read back (a replay). A new dead letter counts on from it.
	Attempts int
	// Receipt settles the message with its source once its outcome is final.
	Receipt Receipt
}

// Receipt settles a message with the source it came from. The pipeline calls
// exactly one of its methods, once, and only when the outcome is final (Ack)
// or when the message must come back (Nack).
type Receipt interface {
	// Ack tells the source the message is finished: it must never be
	// redelivered (JetStream Ack; a Kafka offset that may be committed).
	Ack(ctx context.Context) error
	// Nack tells the source the message is not finished and must be
	// redelivered, no sooner than delay when the source can say so
	// (JetStream NakWithDelay; a Kafka offset that is never committed).
	Nack(ctx context.Context, delay time.Duration) error
}

// Source is where a pipeline takes messages from.
//
// Back-pressure is built into the contract: the pipeline calls Fetch only when
// the bucket has room, and never asks for more than that room. A source that
// must buffer on its own (core NATS) bounds its buffer and counts what it drops.
type Source interface {
	// Fetch blocks until at least one message is available or ctx ends, and
	// returns at most max messages. It returns ctx.Err() when ctx ends. A
	// bounded source (a replay's range) returns io.EOF once it has handed
	// out everything: the pipeline then finishes what it holds and Run
	// returns. Other errors are reported and Fetch is called again after a
	// backoff.
	Fetch(ctx context.Context, max int) ([]*Message, error)
	// Ready returns nil while the source is connected and able to fetch, and
	// otherwise an error saying why not; /readyz shows it.
	Ready() error
	// Close releases the source after every fetched message has been settled.
	Close(ctx context.Context) error
}

// Sink is where a pipeline delivers messages: an HTTP endpoint, or a broker
// (also used as the dead-letter target).
type Sink interface {
	// Send makes one attempt to deliver m and returns nil on success.
	// Errors are classified by the RetryPolicy: a *StatusError carries the
	// status and any Retry-After, ErrMalformed marks a message that can
	// never become a request, and anything else (network errors, timeouts)
	// is retried. An error that wraps ErrNotSent says no request was made;
	// the pipeline then counts no attempt.
	Send(ctx context.Context, m *Message) error
	// Close writes out what the sink buffers and releases its connections,
	// giving up what is left when ctx ends.
	Close(ctx context.Context) error
}

// Destinations is a Sink that names where each message's request goes.
// Push-back (a Retry-After pause, the circuit breaker) holds the
// destination that answered, not the whole pipeline, and key.from: host
// keys lanes by the same name. The core compares names and never parses
// them.
type Destinations interface {
	Sink
	// Destination returns the canonical origin of m's request, such as
	// "https://psp.example.com:443": scheme, host in lower case without a
	// trailing dot or an IP literal in canonical form, and port, the
	// scheme's default made explicit; every spelling of one origin gives
	// the same name. It returns "" when m names no URL the sink would
	// request (Send then refuses it). It must not block.
	Destination(m *Message) string
}

// ErrMalformed marks a message that cannot become a request, such as one
// larger than the sink accepts. It is dead-lettered with reason "malformed"
// and never retried.
var ErrMalformed = errors.New("malformed message")

// ErrRefused marks a message whose destination the sink will not request:
// a URL the message names that is missing, malformed, outside
// allowed_hosts, or that leads to a private address. It is dead-lettered
// with reason "rejected", never retried and never counted against the
// sink's health; no request was made.
var ErrRefused = errors.New("destination refused")

// ErrNotSent marks a Send that failed before any request left (a message
// refused by the client library, a signature that could not be made). It
// is not counted in shaper_requests_total. Sinks mark an error with NotSent.
var ErrNotSent = errors.New("no request was made")

// NotSent returns err marked as ErrNotSent, with err's own text; nil stays
// nil.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return notSentError{err}
}

type notSentError struct{ error }

func (e notSentError) Unwrap() error      { return e.error }
func (notSentError) Is(target error) bool { return target == ErrNotSent }

// StatusError is a response from a sink that was not a success.
type StatusError struct {
	// Code is the response's status code.
	Code int
	// RetryAfter is the earliest time the sink asked to be called again
	// (from a Retry-After header), or zero.
	RetryAfter time.Time
	// Body is the start of the response body, for the Shaper-Error header.
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("status %d", e.Code)
	}
	return fmt.Sprintf("status %d: %s", e.Code, e.Body)
}

// Limiter gives each request its departure time. Implementations live in
// package limiter; they must be safe for concurrent use.
//
// The scheduler asks Next when the next slot comes, waits for it, and takes
// it with Allow only when it sends: a slot is spent only by a request that
// goes.
type Limiter interface {
	// Next returns when the next slot comes for a caller at now, without
	// taking it.
	Next(now time.Time) time.Time
	// Allow takes the next slot if it has come by now, and reports whether
	// it did; when it has not, it takes nothing.
	Allow(now time.Time) bool
	// SetRate changes the limit (requests per second) and burst from now
	// on, whatever was reserved under the old rate.
	SetRate(limit float64, burst int)
	// Limit returns the limit in force at now, after any warm-up.
	Limit(now time.Time) float64
}

// DropCounter is implemented by sources that drop messages by design: core
// NATS drops what arrives while the bucket is full. The pipeline exports the
// count as shaper_source_dropped_total.
type DropCounter interface {
	// Dropped returns how many messages the source has dropped since it started.
	Dropped() uint64
}

// LagReporter is implemented by sources that know how far behind the broker
// they are (Kafka). The pipeline exports it as shaper_source_lag{partition}.
type LagReporter interface {
	// Lag returns, per partition, how many messages lie between the last
	// one fetched and the end of the partition, as last seen.
	Lag() map[string]int64
}

// FallbackReporter is implemented by limiters that share a limit across
// replicas and can fall back to a local one (limiter.Shared). The pipeline
// exports it as shaper_limiter_fallback and in its status.
type FallbackReporter interface {
	// Fallback reports whether the limiter has fallen back to its local limit.
	Fallback() bool
}

// CeilingSetter is implemented by a destination's limiter that caps the
// rates SetRate gives it (limiter.SharedKey, whose rate lives in Redis):
// the pipeline tells it the destination's ceiling, its rate.limit, which
// the admin API may change at run time.
type CeilingSetter interface {
	// SetCeiling changes the most SetRate may set from now on.
	SetCeiling(limit float64)
}

// Adapter is implemented by a limiter whose limit in force a fleet of
// replicas shares under a ceiling, the fleet's rate.limit
// (limiter.Shared): the adaptive rate moves the limit in force with Adapt,
// never above the ceiling, and SetRate, a rate change at run time on any
// replica, moves the ceiling.
type Adapter interface {
	// Adapt sets the limit in force, at most the ceiling, for the fleet.
	Adapt(limit float64)
	// Ceiling returns the fleet's rate.limit as last heard.
	Ceiling() float64
}

// UnusedReporter is implemented by limiters that lease slots of a shared
// schedule ahead of use (limiter.Shared; limiter.OwnedShared counts its
// per-key limits' too). The pipeline exports the count as
// shaper_limiter_unused_total.
type UnusedReporter interface {
	// Unused returns how many leased slots the limiter has given back or
	// let pass unused since it started.
	Unused() int64
}

// Demander is implemented by limiters that lease slots of a shared
// schedule ahead of use (limiter.Shared): before it asks for a slot, the
// pipeline tells it how many messages wait for one, so that a replica with
// few messages leases no more slots than it can use while the fleet's
// schedule is spoken for.
type Demander interface {
	// Demand says how many messages wait for a slot, the caller's included.
	Demand(waiting int)
}

// Revocable is implemented by receipts whose message the source can take
// back before it is finished: a Kafka partition that a rebalance gave to
// another member. The pipeline starts no attempt for a revoked message; it
// nacks it (its offset is not committed) and the partition's new owner
// delivers it, so a rebalance duplicates only what was in flight.
type Revocable interface {
	// Revoked reports whether the message now belongs to someone else.
	Revoked() bool
}

// Pausable is implemented by receipts whose source can stop delivering
// what follows the message from the same place (a Kafka partition) while
// the message's key has no room in the bucket. The pipeline admits such a
// message even into a full lane, since the source keeps its order, and
// calls Pause; once the lane has room it calls the returned resume, once.
// Pauses nest: the place stays paused until every resume has been called.
// Other places keep flowing. A source without Pausable receipts gets a full
// lane's messages back with a Nack instead (JetStream: a delayed nak, which
// is not an attempt).
type Pausable interface {
	// Pause stops fetching from the message's place and returns the
	// function that lets it go on.
	Pause() (resume func())
}
