package sources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper"
)

const (
	// natsIdleWait is how long one pull request for the first message waits
	// at the server. A waiting request gets a new message as soon as it is
	// published, so this sets no latency; it sets how often an idle source
	// asks again (once a second) and how long an abandoned request lingers.
	natsIdleWait = time.Second
	// natsGatherWait bounds the request that gathers the messages already in
	// the stream after the first one. That request asks for no more than the
	// server said were pending, so it normally completes at once; the wait
	// matters only when MaxAckPending holds it back (a NoWait request would
	// then stall a full second with a message in hand).
	natsGatherWait = 100 * time.Millisecond
	// natsReconnectPoll is how often Fetch looks at the connection while it
	// is down. It sends no pull request then: one buffered during the outage
	// would be flushed after the reconnect, and the server would deliver to
	// an inbox nobody reads, holding those messages for AckWait.
	natsReconnectPoll = 100 * time.Millisecond
	// natsAckEvery is how often acks are published at most: those that come
	// within it of the last publish gather and go with the first ack after
	// it, and the connection writes them out in one system call and the
	// server reads them in one, instead of one of each per message. At
	// 100/s from JetStream that is 5 acks a write, and nats-server spent
	// a third less CPU per message than with each ack published at once
	// (alternating rounds: 162–200 against 237–312 µs); at 1000/s, 50
	// (39–40 against 56–69 µs with acks gathered for 5 ms). It delays an
	// ack, never a message: a crash within it redelivers those messages
	// after AckWait.
	natsAckEvery = 50 * time.Millisecond
)

// JetStream is a shaper.Source that consumes a JetStream durable pull
// consumer, which it creates or updates on an existing stream (the operator
// owns streams): at-least-once.
//
// Every message it hands out is held until its receipt settles it. One
// goroutine (keepHeld) sends InProgress for held messages every AckWait/3, so
// the server never redelivers a message that is waiting in the bucket.
// Whatever is not acked when the process dies is redelivered after AckWait.
//
// JetStream is safe for concurrent use by multiple goroutines; concurrent
// Fetch calls take turns.
type JetStream struct {
	conn          *natsConn
	js            jetstream.JetStream
	cfg           NATSConfig
	consumerCfg   jetstream.ConsumerConfig
	progressEvery time.Duration
	log           *slog.Logger
	others        *otherPipelines // with cfg.DeadLetters

	fetching fetchTurn     // concurrent Fetch calls take turns
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	ackMu    sync.Mutex      // guards what follows, and orders publishing acks
	acks     []jetstream.Msg // acked, not yet published (ack)
	acksAt   time.Time       // when acks were last published
	acksDone bool            // closing: ack publishes at once
	ackTail  *time.Timer     // publishes acks no later ack takes along (publishAcks)

	mu       sync.Mutex
	consumer jetstream.Consumer // nil until set up, and again after a fetch fails
	setupErr error              // why consumer is nil
	held     map[*jsReceipt]struct{}
	closed   bool // no goroutine may start once set

	closeOnce sync.Once
	closeErr  error
}

var _ shaper.Source = (*JetStream)(nil)

// NewJetStream connects to cfg.URL and returns a source for cfg.Subject on
// the durable consumer cfg.Durable of stream cfg.Stream. cfg must have been
// validated and defaulted (Stream set; Durable, AckWait). capacity is the
// consumer's MaxAckPending: the pipeline's bucket capacity, so that the
// server hands out no more than the bucket holds, or -1 (no bound) for a
// pipeline whose full lanes hand messages back (bucket.per_key_capacity):
// those stay pending in JetStream, and other keys' messages must get past
// them; and for replicas that share the durable (rate.shared), each with a
// bucket of its own (config's Pipeline.Pending). name is the NATS client
// name.
//
// A server that is down does not fail NewJetStream: the connection keeps
// retrying in the background and Ready says why the source is not ready.
// Neither does a missing stream: Fetch and Ready report it, and recover on
// their own once the stream exists.
func NewJetStream(cfg NATSConfig, capacity int, name string, log *slog.Logger) (*JetStream, error) {
	if capacity < 1 && capacity != -1 {
		return nil, fmt.Errorf("nats: capacity %d: must be >= 1, or -1", capacity)
	}
	if cfg.Stream == "" {
		return nil, errors.New("nats: no stream: a core NATS source, not JetStream")
	}
	if err := checkPipeline(cfg.DeadLetters, cfg.Pipeline); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", "nats", "subject", cfg.Subject, "stream", cfg.Stream, "durable", cfg.Durable)
	conn, err := dialNATS(cfg.URL, name, cfg.WrapConn, log, false)
	if err != nil {
		return nil, err
	}
	s := newJetStream(conn, cfg, capacity)
	if conn.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), natsSetupTimeout)
		// An error is kept for Ready and retried by Fetch.
		_, _ = s.setup(ctx)
		cancel()
	}
	return s, nil
}

func newJetStream(conn *natsConn, cfg NATSConfig, capacity int) *JetStream {
	ackWait := cfg.AckWait
	if ackWait <= 0 {
		ackWait = DefaultAckWait // a config built in code, without SetDefaults
	}
	js, _ := jetstream.New(conn.nc) // fails only for a nil connection
	s := &JetStream{
		conn:   conn,
		js:     js,
		cfg:    cfg,
		others: &otherPipelines{pipeline: cfg.Pipeline, log: conn.log},
		consumerCfg: jetstream.ConsumerConfig{
			Durable:       cfg.Durable,
			FilterSubject: cfg.Subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxAckPending: capacity,
			// Redelivered until acked: only the pipeline decides a
			// message's fate (dead letters are its business).
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		},
		progressEvery: max(ackWait/3, time.Millisecond),
		log:           conn.log,
		fetching:      newFetchTurn(),
		done:          make(chan struct{}),
		held:          make(map[*jsReceipt]struct{}),
		ackTail:       time.NewTimer(time.Hour),
	}
	s.ackTail.Stop()
	s.wg.Add(2)
	go s.keepHeld()
	go s.publishAcks()
	return s
}

// streamNotFoundError reports a missing stream by name. It matches
// jetstream.ErrStreamNotFound with errors.Is.
type streamNotFoundError struct{ stream string }

func (e *streamNotFoundError) Error() string {
	return fmt.Sprintf("nats: stream %q not found", e.stream)
}

func (e *streamNotFoundError) Unwrap() error { return jetstream.ErrStreamNotFound }

// setup returns the consumer, creating or updating it first if it is not set
// up. A failure is kept for ready.
func (s *JetStream) setup(ctx context.Context) (jetstream.Consumer, error) {
	s.mu.Lock()
	c, hadErr := s.consumer, s.setupErr != nil
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, s.consumerCfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // says nothing about the consumer
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			err = &streamNotFoundError{stream: s.cfg.Stream}
		} else {
			err = fmt.Errorf("nats: create or update consumer %q on stream %q: %w", s.cfg.Durable, s.cfg.Stream, err)
		}
		c = nil
	} else if hadErr {
		s.log.Info("nats: consumer set up")
	}
	s.mu.Lock()
	s.consumer, s.setupErr = c, err
	s.mu.Unlock()
	return c, err
}

// fail records a failed fetch so that the next one sets the consumer up
// again (it may have been deleted, or its stream), and returns the error.
func (s *JetStream) fail(err error) error {
	err = fmt.Errorf("nats: fetch from consumer %q on stream %q: %w", s.cfg.Durable, s.cfg.Stream, err)
	s.mu.Lock()
	s.consumer, s.setupErr = nil, err
	s.mu.Unlock()
	return err
}

// Ready returns nil while the source is connected and its consumer is set
// up; otherwise an error saying why not, such as
// `nats: not connected to nats://127.0.0.1:4222` or
// `nats: stream "CALLBACKS" not found`.
func (s *JetStream) Ready() error {
	if err := s.conn.ready(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.consumer != nil:
		return nil
	case s.setupErr != nil:
		return s.setupErr
	}
	return fmt.Errorf("nats: consumer %q on stream %q not set up yet", s.cfg.Durable, s.cfg.Stream)
}

// Fetch takes a message in two requests. The first asks for one message and
// waits at the server up to natsIdleWait, again and again until one comes or
// ctx ends: an idle source sends one request a second and a new message is
// handed out as soon as it is published. The second gathers what is already
// in the stream behind the first (its metadata says how many), up to max-1,
// in one round trip. Neither asks for more than max, so no request lingers
// holding messages nobody asked for.
//
// Fetch returns ctx.Err() when ctx ends; a message that arrived meanwhile is
// Nak'ed, so it is redelivered at once rather than lost. While the connection
// is down Fetch waits for it (Ready says why); other errors (a missing
// stream) are returned at once.
func (s *JetStream) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if err := s.fetching.start(ctx, "nats", max); err != nil {
		return nil, err
	}
	defer s.fetching.done()
	for {
		if s.isClosed() || s.conn.nc.IsClosed() {
			return nil, errClosed
		}
		if !s.conn.nc.IsConnected() {
			if err := sleepUnless(ctx, s.done, natsReconnectPoll); err != nil {
				return nil, err
			}
			continue
		}
		c, err := s.setup(ctx)
		if err != nil {
			return nil, err
		}
		b, err := c.Fetch(1, jetstream.FetchMaxWait(natsIdleWait))
		if err != nil {
			return nil, s.fail(err)
		}
		msgs, err := s.receive(ctx, b)
		if err != nil {
			nakAll(msgs)
			return nil, err
		}
		if len(msgs) == 0 {
			if err := b.Error(); err != nil {
				return nil, s.fail(err)
			}
			continue // the request expired: ask again
		}
		if n := gatherCount(msgs[0], max-1); n > 0 {
			if b, err := c.Fetch(n, jetstream.FetchMaxWait(natsGatherWait)); err == nil {
				more, err := s.receive(ctx, b)
				msgs = append(msgs, more...)
				if err != nil {
					nakAll(msgs)
					return nil, err
				}
				// A failed gather is left for the next first request to
				// find: the messages in hand are good.
			}
		}
		if out := s.hold(ctx, msgs); len(out) > 0 {
			return out, nil
		}
		// Only dead letters without their payload: passed over.
	}
}

// gatherCount is how many more messages to ask for after m: those the server
// said were pending behind it, at most room.
func gatherCount(m jetstream.Msg, room int) int {
	if room < 1 {
		return 0
	}
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return int(min(md.NumPending, uint64(room)))
}

// receive reads b until the request completes. If ctx ends or the source
// closes first, it returns the messages received so far with the reason, and
// leaves the request to a goroutine that Naks whatever still arrives for it.
func (s *JetStream) receive(ctx context.Context, b jetstream.MessageBatch) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	for {
		select {
		case m, ok := <-b.Messages():
			if !ok {
				return msgs, nil
			}
			msgs = append(msgs, m)
		case <-ctx.Done():
			s.abandon(b)
			return msgs, ctx.Err()
		case <-s.done:
			s.abandon(b)
			return msgs, errClosed
		}
	}
}

// abandon Naks, in a goroutine, every message still delivered for a request
// nobody waits for any more. The request ends by itself within its wait.
func (s *JetStream) abandon(b jetstream.MessageBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		// Closing: what still arrives comes back after AckWait.
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for m := range b.Messages() {
			_ = m.Nak() // if lost, the server redelivers after AckWait
		}
	}()
}

// nakAll hands back messages received for a Fetch that cannot return them.
func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak() // if lost, the server redelivers after AckWait
	}
}

func (s *JetStream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// hold turns msgs into pipeline messages and holds them until settled.
// With cfg.DeadLetters each of the pipeline's own dead letters is the
// message that was dead-lettered (AsDeadLetter); one of another pipeline,
// or of none, is not this pipeline's to send, and one written without its
// payload cannot be sent: each is acked, logged and not handed out.
func (s *JetStream) hold(ctx context.Context, msgs []jetstream.Msg) []*shaper.Message {
	now := time.Now()
	out := make([]*shaper.Message, 0, len(msgs))
	rs := make([]*jsReceipt, 0, len(msgs))
	for _, m := range msgs {
		msg, seq := jsMessage(m, s.cfg.Stream)
		origin := msg.Origin
		if s.cfg.DeadLetters {
			if !s.others.own(msg) {
				if err := m.DoubleAck(ctx); err != nil {
					// It comes back after AckWait and is passed over again.
					s.log.Warn("nats: ack a dead letter of another pipeline", "origin", origin, "ack_err", err)
				}
				continue
			}
			if _, omitted := AsDeadLetter(msg); omitted {
				args := []any{"shaper_source", msg.Origin, "origin", origin}
				if err := m.DoubleAck(ctx); err != nil {
					// It comes back after AckWait and is passed over again.
					args = append(args, "ack_err", err)
				}
				s.log.Warn("nats: dead letter without its payload passed over; the original is at its Shaper-Source", args...)
				continue
			}
		}
		r := &jsReceipt{src: s, msg: m, seq: seq, origin: origin, touched: now}
		msg.Receipt = r
		rs = append(rs, r)
		out = append(out, msg)
	}
	s.mu.Lock()
	for _, r := range rs {
		s.held[r] = struct{}{}
	}
	s.mu.Unlock()
	return out
}

// jsMessage is the pipeline message of m, without its receipt, and m's
// stream sequence. Its ID is the Nats-Msg-Id, else its Origin,
// "stream/sequence".
func jsMessage(m jetstream.Msg, stream string) (*shaper.Message, uint64) {
	// The client parsed the reply subject when the message arrived, so
	// Metadata does not fail; the fallback only keeps Origin sane.
	origin, seq := stream+"/?", uint64(0)
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
		origin = md.Stream + "/" + strconv.FormatUint(seq, 10)
	}
	h := m.Headers()
	id := h.Get(nats.MsgIdHdr)
	if id == "" {
		id = origin
	}
	return &shaper.Message{ID: id, Origin: origin, Header: h, Payload: m.Data()}, seq
}

func (s *JetStream) release(r *jsReceipt) {
	s.mu.Lock()
	delete(s.held, r)
	s.mu.Unlock()
}

// keepHeld sends InProgress for every held message whose AckWait timer was
// last restarted more than progressEvery/2 ago, every progressEvery
// (AckWait/3). A message is thus touched at most 1.5×progressEvery = AckWait/2
// after it arrived or was last touched, and one fetched and settled within
// AckWait/6 costs nothing. It runs until close.
func (s *JetStream) keepHeld() {
	defer s.wg.Done()
	t := time.NewTicker(s.progressEvery)
	defer t.Stop()
	var rs []*jsReceipt
	for {
		select {
		case <-s.done:
			return
		case now := <-t.C:
			s.mu.Lock()
			for r := range s.held {
				rs = append(rs, r)
			}
			s.mu.Unlock()
			cutoff := now.Add(-s.progressEvery / 2)
			failed, firstErr := failures(rs, func(r *jsReceipt) error { return r.progress(now, cutoff) })
			if failed > 0 {
				s.log.Warn("nats: could not send InProgress; these messages may be redelivered",
					"messages", failed, "err", firstErr)
			}
			clear(rs) // keep no settled receipt alive
			rs = rs[:0]
		}
	}
}

// ack publishes the ack of m, with those gathered before it, when
// natsAckEvery has passed since acks were last published (and once the
// source is closing); otherwise m's gathers too. What gathers goes with the
// first ack after natsAckEvery, or, when none comes within natsAckEvery
// of the first gathered, with publishAcks. At a steady rate every batch
// goes with a later ack, on the goroutine that acks it: gathering costs no
// wake-up of its own.
func (s *JetStream) ack(m jetstream.Msg) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	now := time.Now()
	if !s.acksDone && now.Sub(s.acksAt) < natsAckEvery {
		s.acks = append(s.acks, m)
		if len(s.acks) == 1 {
			s.ackTail.Reset(natsAckEvery)
		}
		return nil
	}
	s.acksAt = now
	s.publishGathered()
	return m.Ack()
}

// publishGathered publishes the acks gathered so far, with ackMu held.
// Their acks returned nil already: a failure is logged.
func (s *JetStream) publishGathered() {
	if len(s.acks) == 0 {
		return
	}
	s.ackTail.Stop()
	failed, firstErr := failures(s.acks, jetstream.Msg.Ack)
	if failed > 0 {
		s.log.Warn("nats: could not publish acks; these messages will be redelivered after AckWait", "messages", failed, "err", firstErr)
	}
	clear(s.acks)
	s.acks = s.acks[:0]
}

// publishAcks publishes the gathered acks that no later ack took along,
// natsAckEvery after the first of them, and at close what is left, before
// Close flushes the connection. It runs until close.
func (s *JetStream) publishAcks() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			s.ackMu.Lock()
			s.acksDone = true
			s.publishGathered()
			s.ackMu.Unlock()
			return
		case <-s.ackTail.C:
			s.ackMu.Lock()
			if len(s.acks) > 0 { // not taken along while this waited for ackMu
				s.acksAt = time.Now()
				s.publishGathered()
			}
			s.ackMu.Unlock()
		}
	}
}

// failures calls f with each of items and returns how many calls failed
// and the first error: what one log line says of a batch.
func failures[T any](items []T, f func(T) error) (n int, first error) {
	for _, it := range items {
		if err := f(it); err != nil {
			if n == 0 {
				first = err
			}
			n++
		}
	}
	return n, first
}

// Close releases the source; the pipeline calls it after every fetched
// message has been settled. It stops the InProgress loop (a message still
// held is Nak'ed, so it comes back at once), flushes what is left to send
// (acks and naks) and closes the connection. It returns an
// error wrapping ctx.Err() if ctx ends before the source's goroutines have,
// after closing the connection anyway. Calling Close again returns the first
// call's result.
func (s *JetStream) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closeErr = s.close(ctx)
		s.conn.close(ctx)
	})
	return s.closeErr
}

// close stops keepHeld, Naks what is still held (the pipeline settles
// everything before Close, so this is a forced shutdown), and waits for
// the goroutines until ctx ends.
func (s *JetStream) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	var left []*jsReceipt
	for r := range s.held {
		left = append(left, r)
	}
	s.mu.Unlock()
	close(s.done)
	if len(left) > 0 {
		// In stream order, which is the order they come back in.
		slices.SortFunc(left, func(a, b *jsReceipt) int { return cmp.Compare(a.seq, b.seq) })
		s.log.Warn("nats: closing with unsettled messages; nak'ed for redelivery", "messages", len(left))
		for _, r := range left {
			_ = r.Nack(ctx, 0) // if lost, the server redelivers after AckWait
		}
	}
	if err := waitCtx(ctx, s.wg.Wait); err != nil {
		return fmt.Errorf("nats: close: %w", err)
	}
	return nil
}

// jsReceipt settles one JetStream message. Its mutex orders settling after
// any InProgress in flight, so the server never sees an InProgress after a
// Nak (which would replace the Nak's delay with a full AckWait).
type jsReceipt struct {
	src    *JetStream
	msg    jetstream.Msg
	seq    uint64 // stream sequence
	origin string

	mu      sync.Mutex
	settled bool
	touched time.Time // when the server's AckWait timer last restarted, about
}

// Ack acks the message: a publish, at once or with the next batch of acks
// within natsAckEvery (see ack), without waiting for the server to confirm
// it (a confirmed ack costs a reply per message, half again the server's
// CPU and the source's). Close publishes and flushes what is left. An ack
// lost on the way (the connection drops first, or the process dies within
// natsAckEvery) makes the server redeliver the message after AckWait: a
// duplicate, which the Idempotency-Key lets a sink drop, never a loss.
func (r *jsReceipt) Ack(context.Context) error {
	if !r.settle() {
		return ErrAlreadySettled
	}
	if err := r.src.ack(r.msg); err != nil {
		return fmt.Errorf("nats: ack %s: %w", r.origin, err)
	}
	return nil
}

// Nack asks the server to redeliver the message after delay (NakWithDelay),
// or at once when delay <= 0 (Nak). If the Nak is lost the message is
// redelivered after AckWait.
func (r *jsReceipt) Nack(_ context.Context, delay time.Duration) error {
	if !r.settle() {
		return ErrAlreadySettled
	}
	var err error
	if delay > 0 {
		err = r.msg.NakWithDelay(delay)
	} else {
		err = r.msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("nats: nak %s: %w", r.origin, err)
	}
	return nil
}

// settle marks r settled and releases it, and reports whether it was the
// first call.
func (r *jsReceipt) settle() bool {
	r.mu.Lock()
	first := !r.settled
	r.settled = true
	r.mu.Unlock()
	if first {
		r.src.release(r)
	}
	return first
}

// progress sends InProgress unless r is settled or was touched after cutoff.
func (r *jsReceipt) progress(now, cutoff time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled || r.touched.After(cutoff) {
		return nil
	}
	if err := r.msg.InProgress(); err != nil {
		return fmt.Errorf("nats: in progress %s: %w", r.origin, err)
	}
	r.touched = now
	return nil
}
