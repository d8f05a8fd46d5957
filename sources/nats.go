package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper"
)

// NATS is a shaper.Source that consumes a NATS subject. With
// NATSSourceConfig.Stream set it is a JetStream durable pull consumer
// (at-least-once); without it, a core NATS subscription (at-most-once, drops
// counted by Dropped).
//
// The two modes share the connection, Ready and Close, and differ in
// everything else, so NATS holds exactly one of two implementations and
// forwards to it.
//
// NATS is safe for concurrent use by multiple goroutines; concurrent Fetch
// calls take turns.
type NATS struct {
	nc  *nats.Conn
	url string // the configured URLs without credentials, for errors
	log *slog.Logger

	js   *jetStreamSource // set when the config names a stream
	core *coreSource      // set otherwise

	closeOnce sync.Once
	closeErr  error
}

var (
	_ shaper.Source      = (*NATS)(nil)
	_ shaper.DropCounter = (*NATS)(nil)
)

// errClosed is returned by Fetch and Ready after Close.
var errClosed = errors.New("nats: source closed")

// natsSetupTimeout bounds the consumer setup NewNATS attempts, which has no
// ctx of its own. Fetch sets the consumer up again under its own ctx.
const natsSetupTimeout = 5 * time.Second

// NewNATS connects to cfg.URL and returns a source for cfg.Subject: a JetStream
// durable pull consumer when cfg.Stream is set, else a core NATS subscription.
// cfg must have been validated and defaulted (Durable, AckWait). capacity is
// the pipeline's bucket capacity: JetStream's MaxAckPending, or the most
// messages a core NATS subscription buffers. name is the NATS client name.
//
// A server that is down does not fail NewNATS: the connection keeps retrying
// in the background and Ready says why the source is not ready. Neither does
// a missing stream (the operator owns streams): Fetch and Ready report it, and
// recover on their own once the stream exists.
func NewNATS(cfg shaper.NATSSourceConfig, capacity int, name string, log *slog.Logger) (*NATS, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("nats: capacity %d: must be >= 1", capacity)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &NATS{url: redactURLs(cfg.URL)}
	s.log = log.With("source", "nats", "subject", cfg.Subject)
	if cfg.Stream != "" {
		s.log = s.log.With("stream", cfg.Stream, "durable", cfg.Durable)
	}

	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats: connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close, not a lost connection
			}
			s.log.Warn("nats: disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats: reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if cfg.Stream == "" && errors.Is(err, nats.ErrSlowConsumer) {
				// Core NATS drops while the bucket is full by design; the
				// drops are counted, and this fires on every episode.
				s.log.Debug("nats: dropping messages while the bucket is full", "err", err)
				return
			}
			s.log.Warn("nats: asynchronous error", "err", err)
		}),
	}
	if cfg.Stream == "" {
		// A synchronous subscription's channel holds capacity messages, and
		// its pending limit (set in newCoreSource) drops beyond that.
		opts = append(opts, nats.SyncQueueLen(capacity))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", s.url, err)
	}
	s.nc = nc
	if !nc.IsConnected() {
		s.log.Warn("nats: server not reachable; retrying in the background", "url", s.url)
	}

	if cfg.Stream != "" {
		s.js = newJetStreamSource(nc, cfg, capacity, s.log)
		if nc.IsConnected() {
			ctx, cancel := context.WithTimeout(context.Background(), natsSetupTimeout)
			// An error is kept for Ready and retried by Fetch.
			_, _ = s.js.setup(ctx)
			cancel()
		}
		return s, nil
	}
	s.core, err = newCoreSource(nc, cfg.Subject, capacity)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

// Fetch blocks until at least one message is available or ctx ends, and
// returns at most max messages. It returns ctx.Err() when ctx ends; a
// JetStream message that arrived meanwhile is Nak'ed, so it is redelivered at
// once rather than lost. While the connection is down Fetch waits for it
// (Ready says why); other errors (a missing stream) are returned at once.
func (s *NATS) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("nats: fetch %d messages: must be >= 1", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.js != nil {
		return s.js.fetch(ctx, max)
	}
	return s.core.fetch(ctx, max)
}

// Ready returns nil while the source is connected and, for JetStream, its
// consumer is set up; otherwise an error saying why not, such as
// `nats: not connected to nats://127.0.0.1:4222` or
// `nats: stream "CALLBACKS" not found`.
func (s *NATS) Ready() error {
	switch {
	case s.nc.IsClosed():
		return errClosed
	case !s.nc.IsConnected():
		return fmt.Errorf("nats: not connected to %s", s.url)
	case s.js != nil:
		return s.js.ready()
	}
	return nil
}

// Dropped returns how many messages a core NATS source has dropped because its
// buffer was full (the bucket was not fetching). A JetStream source never
// drops: it returns 0.
func (s *NATS) Dropped() uint64 {
	if s.core == nil {
		return 0
	}
	return s.core.dropped()
}

// Close releases the source; the pipeline calls it after every fetched message
// has been settled. It stops the JetStream InProgress loop (a message still
// held is Nak'ed, so it comes back at once), unsubscribes, flushes what is
// left to send (naks; acks are already confirmed) and closes the connection.
// It returns an error wrapping ctx.Err() if ctx ends before the source's
// goroutines have, after closing the connection anyway. Calling Close again
// returns the first call's result.
func (s *NATS) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		var err error
		if s.js != nil {
			err = s.js.close(ctx)
		} else {
			s.core.close()
		}
		s.flush(ctx)
		s.nc.Close()
		s.closeErr = err
	})
	return s.closeErr
}

// flush waits until the server has read what is left to send (Naks,
// InProgress), within ctx. Nothing is lost if it cannot: what a Nak would have
// brought back at once comes back after AckWait.
func (s *NATS) flush(ctx context.Context) {
	if s.nc.IsClosed() {
		return
	}
	if !s.nc.IsConnected() {
		s.log.Warn("nats: closing while disconnected; unsent naks come back after AckWait")
		return
	}
	if _, ok := ctx.Deadline(); !ok {
		// FlushWithContext insists on a deadline.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, natsSetupTimeout)
		defer cancel()
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		s.log.Warn("nats: flush before close failed; unsent naks come back after AckWait", "err", err)
	}
}

// redactURLs returns the comma-separated NATS URLs in raw without user
// information (a password, or a token in the user position), for errors and
// logs.
func redactURLs(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p // as nats.Connect reads it
		}
		u, err := url.Parse(p)
		if err != nil {
			parts[i] = "(unparsable url)"
			continue
		}
		u.User = nil
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
