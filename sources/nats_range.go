package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/shaper"
)

const (
	// natsRangeInactive is how long the server keeps a replay's consumer
	// nobody pulls from: a replay that dies leaves nothing behind for long.
	// A replay that pulls nothing for longer (a full bucket at a low rate)
	// makes its consumer again where it left off.
	natsRangeInactive = 30 * time.Second
	// natsRangeCountTries bounds how often NewJetStreamRange counts its
	// range again while messages of its subject keep arriving.
	natsRangeCountTries = 5
	// jsErrCodeNoMessageFound is the JetStream API's error code for a
	// message get that finds none.
	jsErrCodeNoMessageFound = 10037
)

// JetStreamRange is a Replay of a range of a JetStream stream: the messages
// of one subject filter between two stream sequences, read once through an
// ephemeral consumer of its own. That consumer acks nothing (AckNone): it
// moves no other consumer, removes nothing from an interest stream, and the
// server deletes it after natsRangeInactive if the replay dies. Close
// deletes it.
//
// Its messages are those the live JetStream source would hand out, with the
// same IDs (the Nats-Msg-Id, else "stream/sequence"), so a receiver that saw
// them drops the repeat. They arrive in stream order and are never
// redelivered: a pulled message is handed out, or passed over (the --reason
// filter, a dead letter without its payload), exactly once.
//
// JetStreamRange is safe for concurrent use by multiple goroutines;
// concurrent Fetch calls take turns.
type JetStreamRange struct {
	conn     *natsConn
	js       jetstream.JetStream
	stream   string
	capacity int
	cfg      jetstream.ConsumerConfig // the consumer's, as first made
	from     uint64                   // the first stream sequence of the range
	end      uint64                   // the first stream sequence past it
	books    *rangeBooks
	place    *placeBooks
	pauses   *pauses
	log      *slog.Logger

	fetching fetchTurn     // concurrent Fetch calls take turns
	done     chan struct{} // closed by Close

	// These belong to the Fetch whose turn it is, and to Close after it.
	consumer jetstream.Consumer     // nil once found gone: made again
	batch    jetstream.MessageBatch // the pull request being read, or nil
	hand     []jetstream.Msg        // pulled and not yet handed out
	last     uint64                 // the stream sequence of the last message pulled
	pulled   bool                   // every message of the range has been pulled

	closeOnce sync.Once
	closeErr  error
}

var _ Replay = (*JetStreamRange)(nil)

// NewJetStreamRange connects to url and returns the replay of the messages
// of subject in stream between opts.From and opts.To. stream "" is the
// stream whose subjects cover subject. From is a stream sequence (seq:N), a
// time (the first message stored at or after it) or the stream's first
// message; To, the first past the range, likewise, or the stream's end as
// it is now. A To beyond the end is the end: a replay reads what is stored.
// offset:N bounds are Kafka's and fail. capacity is the most messages one
// pull asks for (the bucket's capacity), or -1 (what Fetch asks for). name
// is the NATS client name.
//
// Unlike the live source, NewJetStreamRange needs the server now: it fails
// when the server is not reachable or the stream is missing.
func NewJetStreamRange(ctx context.Context, url, stream, subject string, capacity int, opts ReplayOptions, name string, log *slog.Logger) (*JetStreamRange, error) {
	if capacity < 1 && capacity != -1 {
		return nil, fmt.Errorf("nats: capacity %d: must be >= 1, or -1", capacity)
	}
	if opts.From.Kind == BoundOffset || opts.To.Kind == BoundOffset {
		return nil, errors.New("nats: offset:N is for Kafka; use seq:N or a time")
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("nats: replay: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := dialNATS(url, name, nil, log.With("source", "nats", "subject", subject), false)
	if err != nil {
		return nil, err
	}
	if err := conn.ready(); err != nil {
		conn.nc.Close()
		return nil, err
	}
	s, err := newJetStreamRange(ctx, conn, stream, subject, capacity, opts)
	if err != nil {
		conn.nc.Close()
		return nil, err
	}
	return s, nil
}

// newJetStreamRange is NewJetStreamRange once conn is up: it finds the
// stream, fixes the range on it and creates the consumer that reads it.
func newJetStreamRange(ctx context.Context, conn *natsConn, stream, subject string, capacity int, opts ReplayOptions) (*JetStreamRange, error) {
	js, _ := jetstream.New(conn.nc) // fails only for a nil connection
	st, stream, err := findStream(ctx, js, stream, subject)
	if err != nil {
		return nil, err
	}
	state := st.CachedInfo().State
	s := &JetStreamRange{
		conn:     conn,
		js:       js,
		stream:   stream,
		capacity: capacity,
		cfg: jetstream.ConsumerConfig{
			Description:       "shaper replay",
			FilterSubject:     subject,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: natsRangeInactive,
		},
		pauses:   newPauses(),
		log:      conn.log.With("stream", stream),
		fetching: newFetchTurn(),
		done:     make(chan struct{}),
	}
	from, err := s.setBounds(ctx, opts, state)
	if err != nil {
		return nil, err
	}
	c, err := js.CreateConsumer(ctx, stream, s.cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: create a replay consumer of %q on stream %q: %w", subject, stream, err)
	}
	s.consumer, s.from = c, from
	total, err := s.countRange(ctx, c)
	if err != nil {
		return nil, err
	}
	s.books = newRangeBooks(opts, formatSeq)
	s.place = s.books.place(stream, int64(from), int64(s.end))
	s.books.count(s.place, total)
	return s, nil
}

// findStream returns stream and its name; stream "" is the stream whose
// subjects cover subject.
func findStream(ctx context.Context, js jetstream.JetStream, stream, subject string) (jetstream.Stream, string, error) {
	if stream == "" {
		name, err := js.StreamNameBySubject(ctx, subject)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, "", fmt.Errorf("nats: no stream covers subject %q", subject)
		}
		if err != nil {
			return nil, "", fmt.Errorf("nats: find the stream of subject %q: %w", subject, err)
		}
		stream = name
	}
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, "", &streamNotFoundError{stream: stream}
	}
	if err != nil {
		return nil, "", fmt.Errorf("nats: stream %q: %w", stream, err)
	}
	return st, stream, nil
}

// setBounds fixes the range opts gives on a stream in state: it returns
// its first stream sequence, sets s.end to the first one past it, and sets
// where s.cfg's consumer starts.
func (s *JetStreamRange) setBounds(ctx context.Context, opts ReplayOptions, state jetstream.StreamState) (uint64, error) {
	var err error
	from := max(state.FirstSeq, 1)
	switch opts.From.Kind {
	case BoundSeq:
		from = opts.From.Seq
		s.cfg.DeliverPolicy, s.cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	case BoundTime:
		t := opts.From.Time
		if from, err = s.seqAt(ctx, t, state.LastSeq); err != nil {
			return 0, err
		}
		s.cfg.DeliverPolicy, s.cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	default:
		s.cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	s.end = state.LastSeq + 1
	switch opts.To.Kind {
	case BoundSeq:
		s.end = min(opts.To.Seq, s.end)
	case BoundTime:
		if s.end, err = s.seqAt(ctx, opts.To.Time, state.LastSeq); err != nil {
			return 0, err
		}
	}
	return from, nil
}

// countRange returns how many messages of the subject the range holds
// (see count; c is the consumer that starts at it), and marks the range
// pulled when it surely holds none. When counting fails it deletes c.
func (s *JetStreamRange) countRange(ctx context.Context, c jetstream.Consumer) (int64, error) {
	total, exact := int64(0), true
	var err error
	if pending := c.CachedInfo().NumPending; pending == 0 || s.end <= s.from {
		s.pulled = true
	} else if total, exact, err = s.count(ctx, c, pending); err != nil {
		_ = s.deleteConsumer(ctx) // and the server deletes it if this fails
		return 0, err
	}
	if exact && total == 0 {
		s.pulled = true
	}
	return total, nil
}

// seqAt returns the stream sequence of the first message stored at or
// after t, or last+1 when there is none. It asks the stream's message get
// API with a start_time (nats-server 2.11 and later).
func (s *JetStreamRange) seqAt(ctx context.Context, t time.Time, last uint64) (uint64, error) {
	req, err := json.Marshal(struct {
		StartTime time.Time `json:"start_time"`
	}{t})
	if err != nil {
		return 0, fmt.Errorf("nats: %v: %w", t, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, natsSetupTimeout)
		defer cancel()
	}
	reply, err := s.conn.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.stream, req)
	if err != nil {
		return 0, fmt.Errorf("nats: find the first message at %s in stream %q: %w", t.Format(time.RFC3339Nano), s.stream, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return 0, fmt.Errorf("nats: find the first message at %s in stream %q: %w", t.Format(time.RFC3339Nano), s.stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jsErrCodeNoMessageFound:
		return last + 1, nil
	case resp.Error != nil:
		return 0, fmt.Errorf("nats: find the first message at %s in stream %q: %w", t.Format(time.RFC3339Nano), s.stream, resp.Error)
	case resp.Message == nil:
		return 0, fmt.Errorf("nats: find the first message at %s in stream %q: empty answer", t.Format(time.RFC3339Nano), s.stream)
	}
	return resp.Message.Seq, nil
}

// count returns how many messages of the subject lie in the range: those
// pending for c, which starts at the range's start, less those pending
// for a second consumer that starts at its end. pending is c's. Messages
// arriving between the two counts would be counted once only, so it
// counts again until c's count stays the same around the second one;
// exact reports whether it did.
func (s *JetStreamRange) count(ctx context.Context, c jetstream.Consumer, pending uint64) (total int64, exact bool, err error) {
	cfg := s.cfg
	cfg.Description = "shaper replay: the end of a range"
	cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, s.end, nil
	e, err := s.js.CreateConsumer(ctx, s.stream, cfg)
	if err != nil {
		return 0, false, fmt.Errorf("nats: count the range of stream %q: %w", s.stream, err)
	}
	defer func() {
		// If this fails the server deletes it after natsRangeInactive.
		_ = s.js.DeleteConsumer(ctx, s.stream, e.CachedInfo().Name)
	}()
	after := e.CachedInfo().NumPending
	for range natsRangeCountTries {
		info, err := c.Info(ctx)
		if err != nil {
			return 0, false, fmt.Errorf("nats: count the range of stream %q: %w", s.stream, err)
		}
		if info.NumPending == pending {
			return int64(pending) - int64(after), true, nil
		}
		pending = info.NumPending
		if info, err = e.Info(ctx); err != nil {
			return 0, false, fmt.Errorf("nats: count the range of stream %q: %w", s.stream, err)
		}
		after = info.NumPending
	}
	return max(int64(pending)-int64(after), 0), false, nil
}

// Fetch hands out, in stream order, at most max of the range's messages
// that have not been handed out, pulling them first (without waiting at the
// server: the range is stored already). It returns io.EOF once the whole
// range has been read and handed out, and ctx.Err() when ctx ends. While a
// message it handed out holds the stream paused (shaper.Pausable), it
// waits.
func (s *JetStreamRange) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if err := s.fetching.start(ctx, "nats", max); err != nil {
		return nil, err
	}
	defer s.fetching.done()
	for {
		select {
		case <-s.done:
			return nil, errClosed
		default:
		}
		if err := s.waitResumed(ctx); err != nil {
			return nil, err
		}
		if len(s.hand) > 0 {
			if out := s.handOut(max); len(out) > 0 {
				return out, nil
			}
			continue
		}
		if s.pulled {
			if err := s.endBatch(ctx); err != nil {
				return nil, err
			}
			s.books.exhausted()
			return nil, io.EOF
		}
		if err := s.pull(ctx, max); err != nil {
			return nil, err
		}
	}
}

// waitResumed waits while the stream is paused.
func (s *JetStreamRange) waitResumed(ctx context.Context) error {
	for {
		paused, changed := s.pauses.state()
		if !paused {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errClosed
		}
	}
}

// handOut books the messages in hand, at most max of them handed out, and
// returns those. The first message past the range ends it, and so does the
// last one of the subject in the stream.
func (s *JetStreamRange) handOut(max int) []*shaper.Message {
	var out []*shaper.Message
	for len(s.hand) > 0 && len(out) < max {
		m := s.hand[0]
		s.hand[0] = nil
		s.hand = s.hand[1:]
		msg, seq := jsMessage(m, s.stream)
		if seq >= s.end {
			s.pulled, s.hand = true, nil
			break
		}
		if msg = s.books.read(s.place, int64(seq), msg, s.pauses.pause); msg != nil {
			out = append(out, msg)
		}
		// NumPending counts the subject's messages after this one; those
		// of the range were all stored when it began.
		md, err := m.Metadata()
		if seq+1 >= s.end || (err == nil && md.NumPending == 0) {
			s.pulled, s.hand = true, nil
		}
	}
	return out
}

// pull reads a pull request for at most n messages into the hand, sending
// it first unless one is open, until it completes. It asks for no more
// than the stream sequences left in the range, and capacity. If ctx ends
// first, the request stays open for the next Fetch to read on: what it
// delivers is never delivered again.
func (s *JetStreamRange) pull(ctx context.Context, n int) error {
	if s.batch == nil {
		c, err := s.consumerNow(ctx)
		if err != nil {
			return err
		}
		if next := max(s.last+1, s.from); next < s.end && s.end-next < uint64(n) {
			n = int(s.end - next)
		}
		if s.capacity > 0 {
			n = min(n, s.capacity)
		}
		if s.batch, err = c.FetchNoWait(n); err != nil {
			return fmt.Errorf("nats: pull from the replay of stream %q: %w", s.stream, err)
		}
	}
	got := 0
	for {
		select {
		case m, ok := <-s.batch.Messages():
			if !ok {
				b := s.batch
				s.batch = nil
				if got > 0 {
					return nil
				}
				return s.pulledNothing(ctx, b.Error())
			}
			if md, err := m.Metadata(); err == nil {
				s.last = md.Sequence.Stream
			}
			s.hand = append(s.hand, m)
			got++
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errClosed
		}
	}
}

// pulledNothing finds out why a pull request delivered nothing: the
// consumer has nothing left (the range has been read), it is gone (made
// again at the next pull), or batchErr.
func (s *JetStreamRange) pulledNothing(ctx context.Context, batchErr error) error {
	info, err := s.consumer.Info(ctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		s.log.Info("nats: the replay's consumer is gone (inactive too long); making it again", "from_seq", s.last+1)
		s.consumer = nil
		return nil
	case err != nil:
		return fmt.Errorf("nats: the replay's consumer on stream %q: %w", s.stream, err)
	case info.NumPending == 0:
		s.pulled = true
		return nil
	case batchErr != nil:
		return fmt.Errorf("nats: pull from the replay of stream %q: %w", s.stream, batchErr)
	}
	// Pending but not delivered at once: ask again shortly.
	return sleepUnless(ctx, s.done, natsReconnectPoll)
}

// consumerNow returns the replay's consumer, making it again after the
// last message pulled if the server deleted it.
func (s *JetStreamRange) consumerNow(ctx context.Context) (jetstream.Consumer, error) {
	if s.consumer != nil {
		return s.consumer, nil
	}
	cfg := s.cfg
	if s.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, s.last+1, nil
	}
	c, err := s.js.CreateConsumer(ctx, s.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("nats: make the replay consumer of %q on stream %q again: %w", cfg.FilterSubject, s.stream, err)
	}
	s.consumer = c
	return c, nil
}

// endBatch waits for an open pull request to complete (at once: it does
// not wait at the server), so that the client's goroutine for it ends.
func (s *JetStreamRange) endBatch(ctx context.Context) error {
	if s.batch == nil {
		return nil
	}
	for {
		select {
		case _, ok := <-s.batch.Messages():
			if !ok {
				s.batch = nil
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Ready returns nil while the replay is connected, else why not, such as
// `nats: not connected to nats://127.0.0.1:4222`.
func (s *JetStreamRange) Ready() error { return s.conn.ready() }

// Progress returns the counts so far.
func (s *JetStreamRange) Progress() ReplayProgress { return s.books.Progress() }

// Resume returns the --from and --to that replay what is left: seq:N of
// the first message without a final outcome (or not read), and seq:N of
// the range's end.
func (s *JetStreamRange) Resume() (from, to string) { return s.books.Resume() }

// Close deletes the replay's consumer and closes the connection. A Fetch
// still running returns errClosed first. It returns an error wrapping
// ctx.Err() if ctx ends before that, after closing the connection anyway
// (the server then deletes the consumer after natsRangeInactive). Calling
// Close again returns the first call's result.
func (s *JetStreamRange) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.done)
		defer s.conn.close(ctx)
		// Wait for the Fetch running, if any; those that come later find
		// done.
		select {
		case s.fetching <- struct{}{}:
			defer s.fetching.done()
		case <-ctx.Done():
			s.closeErr = fmt.Errorf("nats: close: %w", ctx.Err())
			return
		}
		if err := s.endBatch(ctx); err != nil {
			s.closeErr = fmt.Errorf("nats: close: %w", err)
			return
		}
		if err := s.deleteConsumer(ctx); err != nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// deleteConsumer deletes the replay's consumer, unless it is gone already.
func (s *JetStreamRange) deleteConsumer(ctx context.Context) error {
	if s.consumer == nil {
		return nil
	}
	name := s.consumer.CachedInfo().Name
	err := s.js.DeleteConsumer(ctx, s.stream, name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats: delete the replay consumer %q on stream %q: %w", name, s.stream, err)
	}
	s.consumer = nil
	return nil
}
