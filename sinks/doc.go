// Package sinks is where a pipeline's messages go: an HTTP endpoint ([HTTP])
// or a NATS subject ([NATS]), which also serves as the dead-letter target.
//
// Each sink implements [shaper.Sink]. Send makes exactly one attempt and
// never retries on its own: backoff, retries and the rate belong to the core.
// What Send returns is what the core's retry policy classifies:
//
//   - success: the status code ("200", "204") or "ok", and a nil error;
//   - a [*shaper.StatusError]: the sink answered with a non-2xx status. It
//     carries the code, the time asked for by a Retry-After header and a
//     short, single-line excerpt of the body. The policy retries 408, 425,
//     429, 500, 502, 503 and 504 and dead-letters every other status as
//     "rejected";
//   - an error wrapping [shaper.ErrMalformed]: the message can never become a
//     request (larger than the sink accepts, an id that is not a valid
//     header value). The code is "" when, as usual, no request was made. The
//     message is dead-lettered as "malformed" at once;
//   - any other error: the network, a timeout, a broker that is down. The
//     code is "error" and the attempt is retried.
//
// Both sinks are safe for concurrent use by the dispatcher's workers.
package sinks
