package sinks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper"
)

const (
	// natsReconnectWait is the pause between reconnect attempts (nats.go adds
	// its own jitter). Sends fail while disconnected and the core retries
	// them, so a short wait shortens the outage seen by the pipeline.
	natsReconnectWait = time.Second
	// natsDefaultTimeout bounds a publish, flush or stream lookup when the
	// caller's ctx has no deadline (FlushWithContext requires one).
	natsDefaultTimeout = 5 * time.Second
	// natsRecheck is how long the answer to "which stream covers the
	// subject?" is trusted before it is asked again, so a stream created or
	// deleted while the daemon runs is noticed.
	natsRecheck = time.Minute
	// natsCloseWait bounds how long Close waits for the connection to drain.
	natsCloseWait = 10 * time.Second
)

// NATS publishes each message to one NATS subject: as a pipeline sink
// (shaping into a subject) and as the dead-letter target.
//
// The payload goes out unchanged and m.Header becomes the NATS headers, as
// they are. Send returns only once the message is safe on the server:
//
//   - When a JetStream stream covers the subject, Send publishes through
//     JetStream and waits for the stream's PubAck, so the message is stored
//     (durable) before the core acks its source.
//   - Otherwise Send makes a core publish followed by a flush (a PING/PONG
//     round trip on the same connection), so the server has received it.
//
// Which of the two applies is looked up with the JetStream API
// (StreamNameBySubject) on the first Send, and cached. The answer is looked
// up again after any failed Send and once it is older than a minute, so a
// stream created or removed at run time is noticed. A server without
// JetStream, or a stream that does not ack (NoAck), means a core publish. If
// the lookup itself fails, Send fails and the core retries it.
//
// A JetStream publish is a request on the subject itself, so core subscribers
// receive it as well: Send never follows a failed JetStream publish with a
// core one, and publishes each message once per call. A publish whose ack was
// lost may still have been stored; the core's retry then publishes it again,
// which at-least-once delivery allows. A message that carries a Nats-Msg-Id
// header is deduplicated by the stream in that case.
//
// The connection reconnects forever, and a server that is down when NewNATS
// runs does not fail it: Send fails until the connection is up. Nothing is
// buffered while disconnected (a buffered message would go out later, after
// the core had already been told it failed and had retried it).
//
// NATS is safe for concurrent use by multiple goroutines.
type NATS struct {
	subject string
	nc      *nats.Conn
	js      jetstream.JetStream
	closed  chan struct{} // closed by the connection's ClosedHandler

	mu      sync.Mutex
	route   natsRoute // how to publish; routeUnknown until looked up
	routeAt time.Time // when route was looked up
}

var _ shaper.Sink = (*NATS)(nil)

// natsRoute is how a NATS sink publishes to its subject.
type natsRoute int

const (
	routeUnknown natsRoute = iota // not looked up yet, or after a failure
	routeCore                     // core publish + flush: no stream covers the subject
	routeStream                   // JetStream publish, waiting for the PubAck
)

// NewNATS connects to cfg.URL as client name and returns a publisher to
// cfg.Subject. It does not wait for the server: with the server down it
// succeeds and keeps trying to connect in the background.
func NewNATS(cfg NATSPublisherConfig, name string) (*NATS, error) {
	if !literalSubject(cfg.Subject) {
		return nil, fmt.Errorf("nats: cannot publish to subject %q: want dot-separated tokens without wildcards or spaces", cfg.Subject)
	}
	n := &NATS{subject: cfg.Subject, closed: make(chan struct{})}
	nc, err := nats.Connect(cfg.URL,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(natsReconnectWait),
		// No reconnect buffer: a publish while disconnected fails at once
		// instead of going out later behind the core's retry of it.
		nats.ReconnectBufSize(-1),
		nats.DrainTimeout(natsCloseWait),
		nats.ClosedHandler(func(*nats.Conn) { close(n.closed) }),
	)
	if err != nil {
		// Not the URL: it may carry a user and password.
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	n.nc, n.js = nc, js
	return n, nil
}

// Send publishes m.Payload with m.Header to the subject and returns nil once
// the stream has stored it or, with no stream, once the server has received
// it; otherwise why. A message the server can never take is
// shaper.ErrMalformed: over its max_payload or with a header name that is not
// valid (refused by the client, marked shaper.NotSent), or over the stream's
// max_msg_size (refused by the stream).
func (n *NATS) Send(ctx context.Context, m *shaper.Message) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, natsDefaultTimeout)
		defer cancel()
	}
	route, err := n.lookup(ctx)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: n.subject, Data: m.Payload}
	if len(m.Header) > 0 {
		// A copy: the JetStream client may add headers to the message.
		msg.Header = nats.Header(maps.Clone(m.Header))
	}
	if route == routeStream {
		_, err = n.js.PublishMsg(ctx, msg)
	} else {
		err = n.nc.PublishMsg(msg)
		if err == nil {
			err = n.nc.FlushWithContext(ctx)
		}
	}
	if err != nil {
		n.forget()
		notSent := errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadHeaderMsg) // refused by the client
		if malformed(err) {
			err = fmt.Errorf("%w: %w", shaper.ErrMalformed, err)
		}
		err = fmt.Errorf("nats: publish to %s: %w", n.subject, err)
		if notSent {
			return shaper.NotSent(err)
		}
		return err
	}
	return nil
}

// lookup returns how to publish, asking the server which stream covers the
// subject when the cached answer is missing or old.
func (n *NATS) lookup(ctx context.Context) (natsRoute, error) {
	n.mu.Lock()
	route, at := n.route, n.routeAt
	n.mu.Unlock()
	if route != routeUnknown && time.Since(at) < natsRecheck {
		return route, nil
	}

	// Concurrent Sends may all ask at once after a failure; the answers
	// agree, and asking costs one small request each.
	route = routeStream
	name, err := n.js.StreamNameBySubject(ctx, n.subject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		// Nobody answers the JetStream API: the server runs without it.
		errors.Is(err, nats.ErrNoResponders):
		route = routeCore
	case err != nil:
		return routeUnknown, fmt.Errorf("nats: look up the stream of %s: %w", n.subject, err)
	default:
		s, err := n.js.Stream(ctx, name)
		if err != nil {
			return routeUnknown, fmt.Errorf("nats: look up stream %s: %w", name, err)
		}
		if s.CachedInfo().Config.NoAck {
			route = routeCore // it stores the message but never acks
		}
	}

	n.mu.Lock()
	n.route, n.routeAt = route, time.Now()
	n.mu.Unlock()
	return route, nil
}

// forget drops the cached route, so the next Send looks it up again.
func (n *NATS) forget() {
	n.mu.Lock()
	n.route = routeUnknown
	n.mu.Unlock()
}

// literalSubject reports whether s is a subject a message can be published
// to: non-empty tokens separated by dots, no wildcard, no white space.
func literalSubject(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\x00") {
			return false
		}
	}
	return true
}

// malformed reports whether a publish failed because of the message itself,
// so that sending it again can never succeed.
func malformed(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadHeaderMsg)
}

// Close drains the connection, which flushes what was published, and
// closes it. It returns once the connection is closed; the drain is given
// up to 10s, and cut short when ctx ends.
func (n *NATS) Close(ctx context.Context) error {
	err := n.nc.Drain()
	switch {
	case errors.Is(err, nats.ErrConnectionReconnecting):
		err = nil // nothing can be flushed; Drain closed the connection
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil // closed before
	case err != nil:
		n.nc.Close()
	}
	// Drain closes the connection within natsCloseWait; the timer only
	// guards against a ClosedHandler that never runs.
	timer := time.NewTimer(2 * natsCloseWait)
	defer timer.Stop()
	select {
	case <-n.closed:
	case <-ctx.Done():
		n.nc.Close()
		return fmt.Errorf("nats: close: drain cut short: %w", context.Cause(ctx))
	case <-timer.C:
		n.nc.Close()
		return errors.New("nats: close: connection not closed after 20s")
	}
	if err != nil {
		return fmt.Errorf("nats: drain: %w", err)
	}
	return nil
}
