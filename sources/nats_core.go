package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper"
)

// CoreNATS is a shaper.Source that consumes a core NATS subject (no
// stream): at-most-once. The server pushes every message at once and keeps
// none, so the subscription buffers up to capacity messages while the bucket
// is full, and the client drops, and counts (Dropped), what arrives beyond
// that. What is buffered when the process stops is lost, and a Nack cannot
// bring a message back.
//
// CoreNATS is safe for concurrent use by multiple goroutines.
type CoreNATS struct {
	conn        *natsConn
	sub         *nats.Subscription
	subject     string
	deadLetters bool            // cfg.DeadLetters
	others      *otherPipelines // with deadLetters
	log         *slog.Logger
	// idPrefix makes generated IDs unique across sources and restarts, so a
	// sink never takes a new message for a duplicate of an old one.
	idPrefix string
	seq      atomic.Uint64
	// lastDropped keeps the drop count readable after the subscription closes.
	lastDropped atomic.Uint64

	closeOnce sync.Once
}

var (
	_ shaper.Source      = (*CoreNATS)(nil)
	_ shaper.DropCounter = (*CoreNATS)(nil)
)

// NewCoreNATS connects to cfg.URL and subscribes to cfg.Subject. cfg must have
// been validated and have no Stream (NewJetStream takes those). capacity is
// the pipeline's bucket capacity: the most messages the subscription buffers.
// name is the NATS client name.
//
// A server that is down does not fail NewCoreNATS: the connection keeps
// retrying in the background, the subscription is made when it connects, and
// Ready says why the source is not ready meanwhile.
func NewCoreNATS(cfg NATSConfig, capacity int, name string, log *slog.Logger) (*CoreNATS, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("nats: capacity %d: must be >= 1", capacity)
	}
	if cfg.Stream != "" {
		return nil, fmt.Errorf("nats: stream %q set: a JetStream source, not core NATS", cfg.Stream)
	}
	if err := checkPipeline(cfg.DeadLetters, cfg.Pipeline); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", "nats", "subject", cfg.Subject)
	// A synchronous subscription's channel holds capacity messages, and its
	// pending limit drops beyond that.
	conn, err := dialNATS(cfg.URL, name, cfg.WrapConn, log, true, nats.SyncQueueLen(capacity))
	if err != nil {
		return nil, err
	}
	sub, err := conn.nc.SubscribeSync(cfg.Subject)
	if err == nil {
		// Bound the buffer by count; keep the client's default byte bound too.
		if err = sub.SetPendingLimits(capacity, nats.DefaultSubPendingBytesLimit); err != nil {
			_ = sub.Unsubscribe()
			err = fmt.Errorf("nats: limit the buffer of %q to %d messages: %w", cfg.Subject, capacity, err)
		}
	} else {
		err = fmt.Errorf("nats: subscribe to %q: %w", cfg.Subject, err)
	}
	if err != nil {
		conn.nc.Close()
		return nil, err
	}
	return &CoreNATS{
		conn:        conn,
		sub:         sub,
		subject:     cfg.Subject,
		deadLetters: cfg.DeadLetters,
		others:      &otherPipelines{pipeline: cfg.Pipeline, log: log},
		log:         log,
		idPrefix:    fmt.Sprintf("%08x", rand.Uint32()),
	}, nil
}

// Fetch waits for the first buffered message, then takes what else is
// buffered, up to max. It returns ctx.Err() when ctx ends first. While the
// connection is down it waits (Ready says why).
func (c *CoreNATS) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if err := checkFetch(ctx, "nats", max); err != nil {
		return nil, err
	}
	var first *shaper.Message
	for first == nil {
		m, err := c.sub.NextMsgWithContext(ctx)
		if err == nil {
			first = c.message(m) // nil: passed over
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, nats.ErrSlowConsumer) {
			continue // only a notice that messages were dropped; Dropped counts them
		}
		if errors.Is(err, nats.ErrBadSubscription) || errors.Is(err, nats.ErrConnectionClosed) {
			return nil, errClosed
		}
		return nil, fmt.Errorf("nats: next message on %q: %w", c.subject, err)
	}
	out := []*shaper.Message{first}
	// Each ErrSlowConsumer notice (and each dead letter passed over)
	// stands for at least one message, so the bound only matters under a
	// flood.
	for tries := 0; len(out) < max && tries < 2*max; tries++ {
		m, err := c.sub.NextMsg(0)
		if errors.Is(err, nats.ErrSlowConsumer) {
			continue
		}
		if err != nil {
			break // nothing more buffered
		}
		if msg := c.message(m); msg != nil {
			out = append(out, msg)
		}
	}
	return out, nil
}

// message is the pipeline message of m. With deadLetters it is the message
// that was dead-lettered (AsDeadLetter), or nil for a dead letter of
// another pipeline (or of none), which is not this pipeline's to send, or
// one written without its payload, which cannot be sent: each is logged
// and passed over.
func (c *CoreNATS) message(m *nats.Msg) *shaper.Message {
	id := m.Header.Get(nats.MsgIdHdr)
	if id == "" {
		id = m.Subject + "/" + c.idPrefix + "-" + strconv.FormatUint(c.seq.Add(1), 10)
	}
	msg := &shaper.Message{
		ID:      id,
		Origin:  m.Subject,
		Header:  m.Header,
		Payload: m.Data,
		Receipt: coreReceipt{},
	}
	if c.deadLetters {
		if !c.others.own(msg) {
			return nil
		}
		if _, omitted := AsDeadLetter(msg); omitted {
			c.log.Warn("nats: dead letter without its payload passed over; the original is at its Shaper-Source",
				"shaper_source", msg.Origin, "subject", m.Subject)
			return nil
		}
	}
	return msg
}

// Ready returns nil while the source is connected, else why not, such as
// `nats: not connected to nats://127.0.0.1:4222`.
func (c *CoreNATS) Ready() error {
	return c.conn.ready()
}

// Dropped returns how many messages the source has dropped because its
// buffer was full (the bucket was not fetching).
func (c *CoreNATS) Dropped() uint64 {
	if n, err := c.sub.Dropped(); err == nil {
		c.lastDropped.Store(uint64(n))
	}
	return c.lastDropped.Load()
}

// Close unsubscribes, so what is still buffered is lost (at-most-once), and
// closes the connection. Calling it again does nothing; it always returns nil.
func (c *CoreNATS) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.Dropped()
		_ = c.sub.Unsubscribe() // the connection closes next anyway
		c.conn.close(ctx)
	})
	return nil
}

// coreReceipt settles a core NATS message: there is nothing to settle. The
// server keeps no core NATS message, so Ack has nothing to confirm and a Nack
// cannot bring the message back: a nacked core NATS message is lost, which is
// what at-most-once means. Both return nil, however often they are called.
type coreReceipt struct{}

// Ack does nothing and returns nil.
func (coreReceipt) Ack(context.Context) error { return nil }

// Nack does nothing and returns nil: the message is lost.
func (coreReceipt) Nack(context.Context, time.Duration) error { return nil }
