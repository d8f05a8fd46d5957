package sources

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper"
)

// coreSource fetches from a core NATS subscription: at-most-once. The server
// pushes every message at once and keeps none, so the subscription buffers up
// to capacity messages while the bucket is full, and the client drops, and
// counts, what arrives beyond that.
type coreSource struct {
	sub     *nats.Subscription
	subject string
	// idPrefix makes generated IDs unique across sources and restarts, so a
	// sink never takes a new message for a duplicate of an old one.
	idPrefix string
	seq      atomic.Uint64
	// lastDropped keeps the drop count readable after the subscription closes.
	lastDropped atomic.Uint64
}

func newCoreSource(nc *nats.Conn, subject string, capacity int) (*coreSource, error) {
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		return nil, fmt.Errorf("nats: subscribe to %q: %w", subject, err)
	}
	// Bound the buffer by count; keep the client's default byte bound too.
	if err := sub.SetPendingLimits(capacity, nats.DefaultSubPendingBytesLimit); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("nats: limit the buffer of %q to %d messages: %w", subject, capacity, err)
	}
	return &coreSource{
		sub:      sub,
		subject:  subject,
		idPrefix: fmt.Sprintf("%08x", rand.Uint32()),
	}, nil
}

// fetch waits for the first buffered message, then takes what else is
// buffered, up to max.
func (c *coreSource) fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	var m *nats.Msg
	for {
		var err error
		m, err = c.sub.NextMsgWithContext(ctx)
		if err == nil {
			break
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
	out := []*shaper.Message{c.message(m)}
	// Each ErrSlowConsumer notice stands for at least one drop, so the
	// bound only matters under a flood.
	for tries := 0; len(out) < max && tries < 2*max; tries++ {
		m, err := c.sub.NextMsg(0)
		if errors.Is(err, nats.ErrSlowConsumer) {
			continue
		}
		if err != nil {
			break // nothing more buffered
		}
		out = append(out, c.message(m))
	}
	return out, nil
}

func (c *coreSource) message(m *nats.Msg) *shaper.Message {
	id := m.Header.Get(nats.MsgIdHdr)
	if id == "" {
		id = m.Subject + "/" + c.idPrefix + "-" + strconv.FormatUint(c.seq.Add(1), 10)
	}
	return &shaper.Message{
		ID:      id,
		Origin:  m.Subject,
		Header:  m.Header,
		Payload: m.Data,
		Receipt: coreReceipt{},
	}
}

func (c *coreSource) dropped() uint64 {
	if n, err := c.sub.Dropped(); err == nil {
		c.lastDropped.Store(uint64(n))
	}
	return c.lastDropped.Load()
}

// close unsubscribes; what is still buffered is lost (at-most-once).
func (c *coreSource) close() {
	c.dropped()
	_ = c.sub.Unsubscribe() // the connection closes next anyway
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
