package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/shaper"
)

const (
	// kafkaQueueMax bounds the messages kafka-go's reader fetches ahead of
	// Fetch (its QueueCapacity, at most the bucket's capacity). With
	// kafkaMaxBytes per partition fetch, it bounds the source's memory
	// whatever the lag.
	kafkaQueueMax = 100
	// kafkaMaxBytes is the most bytes one fetch of one partition asks for
	// (kafka-go's default). A larger record still arrives: brokers return
	// the first record of a fetch whatever its size.
	kafkaMaxBytes = 1 << 20
	// kafkaGatherWait bounds how long Fetch, holding a message, waits for
	// more: long enough to take what kafka-go has already queued, short
	// enough to add no noticeable latency.
	kafkaGatherWait = time.Millisecond
	// kafkaErrorPause is how long Fetch pauses after the reader returns an
	// error, so that a failing reader cannot make it spin.
	kafkaErrorPause = 100 * time.Millisecond
	// kafkaStageTimeout bounds staging the final offsets on Close. Staging
	// only queues them for kafka-go's commit loop; it takes longer only when
	// no commit loop runs (the group is rebalancing or unreachable), and
	// then nothing would commit them anyway.
	kafkaStageTimeout = time.Second
	// kafkaReadBackoffMin and kafkaReadBackoffMax bound how long a partition
	// reader waits before fetching again after an error (kafka-go's
	// defaults).
	kafkaReadBackoffMin = 100 * time.Millisecond
	kafkaReadBackoffMax = time.Second
	// kafkaJoinBackoffMax caps how long the member waits before joining the
	// group again after a failed attempt; it waits HeartbeatInterval when
	// that is shorter.
	kafkaJoinBackoffMax = time.Second
)

// errKafkaClosed is returned by Fetch, Ready and late receipts after Close.
var errKafkaClosed = errors.New("kafka: source closed")

// Kafka is a shaper.Source that consumes one topic as a member of a consumer
// group, on segmentio/kafka-go's group Reader. Members of one group split the
// topic's partitions.
//
// # Commits
//
// Messages finish out of order, so Kafka commits per partition the highest
// contiguous finished offset: the lowest offset fetched and not yet acked, or
// one past the last one fetched when all are acked (see commitTracker). An
// Ack makes its offset committable at once; the offset is staged with the
// reader, which commits staged offsets every CommitInterval, when a rebalance
// revokes partitions (at the end of every group generation), and on Close.
// A crash loses nothing: every message not acked, and those acked after the
// last commit, are redelivered to the group.
//
// # Redelivery
//
// A group reader cannot seek, so Nack(delay) redelivers by itself: the
// message waits in the source's own delay queue and Fetch returns it again,
// with the same ID, once delay has passed, before any new message. Its offset
// stays unfinished meanwhile, so the partition's commits wait for it. On
// Close, a message still in the delay queue is not committed: it comes back
// after a restart, from the broker.
//
// After a rebalance moves a partition to another member, this member still
// delivers what it had fetched or nacked from it and commits it when
// finished; the new owner starts from the last committed offset. Both may
// deliver the same messages (at-least-once: duplicates, never a loss).
//
// Kafka is safe for concurrent use by multiple goroutines; concurrent Fetch
// calls take turns.
type Kafka struct {
	cfg       shaper.KafkaSourceConfig
	readerCfg kafka.ReaderConfig
	reader    atomic.Pointer[kafka.Reader] // nil until the topic is first seen
	log       *slog.Logger
	marks     *commitTracker
	health    *kafkaHealth

	started    chan struct{} // closed once reader is set
	done       chan struct{} // closed by Close
	fetching   chan struct{} // size 1: the token of the one Fetch running
	commitWake chan struct{} // size 1: a mark advanced
	stop       context.CancelFunc
	wg         sync.WaitGroup // commitLoop and health.watch

	mu      sync.Mutex
	delayed delayQueue
	seq     uint64             // orders equal due times in delayed
	wake    context.CancelFunc // ends the wait of a Fetch blocked in the reader
	wakeAt  time.Time          // when that Fetch wakes by itself; zero: never
	lag     map[int]int64
	closed  bool

	closeOnce sync.Once
	closeErr  error
}

var (
	_ shaper.Source      = (*Kafka)(nil)
	_ shaper.LagReporter = (*Kafka)(nil)
)

// NewKafka returns a source that consumes cfg.Topic in group cfg.Group. cfg
// must have been validated and defaulted. capacity is the pipeline's bucket
// capacity, which bounds how much the reader fetches ahead; name is the Kafka
// client id.
//
// Brokers that are down, a missing topic or failed authentication do not
// fail NewKafka: the source keeps trying in the background and Ready says
// why it is not ready. The group reader starts once the topic is first seen,
// so that it is assigned the topic's partitions.
func NewKafka(cfg shaper.KafkaSourceConfig, capacity int, name string, log *slog.Logger) (*Kafka, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("kafka: capacity %d: must be >= 1", capacity)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dialer, err := kafkaconn.Dialer(cfg.KafkaConnConfig, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	s := &Kafka{
		cfg:        cfg,
		log:        log.With("source", "kafka", "topic", cfg.Topic, "group", cfg.Group),
		marks:      newCommitTracker(),
		started:    make(chan struct{}),
		done:       make(chan struct{}),
		fetching:   make(chan struct{}, 1),
		commitWake: make(chan struct{}, 1),
		lag:        make(map[int]int64),
	}
	s.health = newKafkaHealth(cfg, dialer, s.log)

	start := kafka.FirstOffset
	if cfg.Start == shaper.StartLatest {
		start = kafka.LastOffset
	}
	s.readerCfg = kafka.ReaderConfig{
		Brokers:       cfg.Brokers,
		GroupID:       cfg.Group,
		Topic:         cfg.Topic,
		Dialer:        dialer,
		QueueCapacity: min(capacity, kafkaQueueMax),
		MinBytes:      1,
		MaxBytes:      kafkaMaxBytes,
		MaxWait:       cfg.MaxWait,
		// Lag is computed from each fetched message's high watermark.
		ReadLagInterval:   -1,
		HeartbeatInterval: cfg.HeartbeatInterval,
		// Offsets staged by CommitMessages are committed on this interval
		// and when a generation ends (a rebalance, Close).
		CommitInterval:   cfg.CommitInterval,
		SessionTimeout:   cfg.SessionTimeout,
		RebalanceTimeout: cfg.RebalanceTimeout,
		JoinGroupBackoff: min(cfg.HeartbeatInterval, kafkaJoinBackoffMax),
		// Not WatchPartitionChanges: kafka-go's watcher ends a generation
		// at once when the topic is missing, and the member then rejoins
		// in a busy loop that races with itself (v0.4.51). Partitions
		// added to the topic are picked up at the next rebalance.
		StartOffset:    start,
		ReadBackoffMin: kafkaReadBackoffMin,
		ReadBackoffMax: kafkaReadBackoffMax,
		Logger:         kafka.LoggerFunc(s.health.readerInfo),
		ErrorLogger:    kafka.LoggerFunc(s.health.readerError),
	}
	if err := s.readerCfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka: reader config: %w", err)
	}

	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Go(func() { s.commitLoop(ctx) })
	s.wg.Go(func() { s.health.watch(ctx, s.startReader) })
	return s, nil
}

// startReader starts the group reader, unless it runs already. health.watch
// calls it whenever a probe sees the topic.
func (s *Kafka) startReader() {
	if s.reader.Load() != nil {
		return
	}
	r, err := newReader(s.readerCfg)
	if err != nil {
		s.health.fail(err)
		return
	}
	s.reader.Store(r)
	close(s.started)
}

// newReader is kafka.NewReader returning an error instead of panicking on a
// config it rejects.
func newReader(rc kafka.ReaderConfig) (r *kafka.Reader, err error) {
	defer func() {
		if v := recover(); v != nil {
			r, err = nil, fmt.Errorf("kafka: reader config: %v", v)
		}
	}()
	return kafka.NewReader(rc), nil
}

// Fetch blocks until at least one message is available or ctx ends, and
// returns at most max messages: nacked messages whose delay has passed first,
// then new ones from the reader, gathering what the reader has already
// fetched without waiting for more. It returns ctx.Err() when ctx ends before
// a message is in hand; a message the reader had ready stays with the reader.
//
// While the brokers are unreachable, or the group is rebalancing, Fetch waits
// (Ready says why). It returns an error only after Close.
func (s *Kafka) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("kafka: fetch %d messages: must be >= 1", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case s.fetching <- struct{}{}:
		defer func() { <-s.fetching }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-s.started:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, errKafkaClosed
	}
	r := s.reader.Load()

	var out []*shaper.Message
	for len(out) == 0 {
		var wakeAt time.Time
		var err error
		out, wakeAt, err = s.redeliver(out, time.Now(), max)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			break
		}
		m, err := s.fetchMessage(ctx, r, wakeAt)
		switch {
		case err == nil:
			if d := s.hold(m); d != nil {
				out = append(out, &d.msg)
			}
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// Woken: a nacked message is due.
		case errors.Is(err, io.EOF):
			return nil, errKafkaClosed
		default:
			s.health.fetchError(err)
			if err := sleepCtx(ctx, kafkaErrorPause); err != nil {
				return nil, err
			}
		}
	}
	return s.gather(ctx, r, out, max), nil
}

// redeliver appends to out the nacked messages that are due at now, up to
// max in all, and returns when the next one is due (zero when none waits).
func (s *Kafka) redeliver(out []*shaper.Message, now time.Time, max int) ([]*shaper.Message, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return out, time.Time{}, errKafkaClosed
	}
	for len(out) < max && len(s.delayed) > 0 && !s.delayed[0].due.After(now) {
		d := s.delayed.pop().d
		again := &kafkaDelivery{src: s, pending: d.pending, msg: d.msg}
		again.msg.Receipt = again
		out = append(out, &again.msg)
	}
	var next time.Time
	if len(s.delayed) > 0 {
		next = s.delayed[0].due
	}
	return out, next, nil
}

// fetchMessage waits for the reader's next message until ctx ends, wakeAt
// passes (when not zero), or a Nack makes an earlier message due. kafka-go's
// FetchMessage takes a message from its queue only when it returns it, so a
// message is never lost to an ended wait.
func (s *Kafka) fetchMessage(ctx context.Context, r *kafka.Reader, wakeAt time.Time) (kafka.Message, error) {
	var fctx context.Context
	var cancel context.CancelFunc
	if wakeAt.IsZero() {
		fctx, cancel = context.WithCancel(ctx)
	} else {
		fctx, cancel = context.WithDeadline(ctx, wakeAt)
	}
	defer cancel()
	s.mu.Lock()
	s.wake, s.wakeAt = cancel, wakeAt
	s.mu.Unlock()
	m, err := r.FetchMessage(fctx)
	s.mu.Lock()
	s.wake, s.wakeAt = nil, time.Time{}
	s.mu.Unlock()
	return m, err
}

// gather appends to out what the reader has ready, up to max in all, waiting
// at most kafkaGatherWait.
func (s *Kafka) gather(ctx context.Context, r *kafka.Reader, out []*shaper.Message, max int) []*shaper.Message {
	if len(out) >= max {
		return out
	}
	gctx, cancel := context.WithTimeout(ctx, kafkaGatherWait)
	defer cancel()
	for len(out) < max {
		m, err := r.FetchMessage(gctx)
		if err != nil {
			if gctx.Err() == nil && !errors.Is(err, io.EOF) {
				s.health.fetchError(err)
			}
			break
		}
		if d := s.hold(m); d != nil {
			out = append(out, &d.msg)
		}
	}
	return out
}

// hold tracks m as fetched and unfinished and returns its delivery, or nil
// when the reader fetched m again (after a rebalance) while this source still
// holds it or has already finished it.
func (s *Kafka) hold(m kafka.Message) *kafkaDelivery {
	d := &kafkaDelivery{src: s}
	d.first.partition, d.first.offset = m.Partition, m.Offset
	d.pending = &d.first
	if !s.marks.add(d.pending) {
		return nil
	}
	id := m.Topic + "/" + strconv.Itoa(m.Partition) + "/" + strconv.FormatInt(m.Offset, 10)
	payload := m.Value
	if payload == nil {
		payload = []byte{}
	}
	d.msg = shaper.Message{
		ID:      id,
		Origin:  id,
		Key:     m.Key,
		Header:  kafkaHeader(m.Headers),
		Payload: payload,
		Receipt: d,
	}
	s.mu.Lock()
	s.lag[m.Partition] = max(m.HighWaterMark-m.Offset-1, 0)
	s.mu.Unlock()
	s.health.fetched()
	return d
}

// kafkaHeader returns the record headers hs by name, values in record order,
// or nil when there are none.
func kafkaHeader(hs []kafka.Header) map[string][]string {
	if len(hs) == 0 {
		return nil
	}
	h := make(map[string][]string, len(hs))
	for _, kv := range hs {
		h[kv.Key] = append(h[kv.Key], string(kv.Value))
	}
	return h
}

// Ready returns nil while the reader is fetching normally, and otherwise why
// not, such as `kafka: topic "x" not found`, `kafka: brokers unreachable:
// dial tcp 127.0.0.1:1: connect: connection refused`, `kafka: SASL
// authentication failed at 127.0.0.1:9092: user "u", mechanism PLAIN: ...` or
// an error the group reader reported. See kafkaHealth.
func (s *Kafka) Ready() error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errKafkaClosed
	}
	return s.health.ready()
}

// Lag returns, per partition (its number as a string), how many messages lie
// between the last one fetched from it and the partition's end, as of that
// fetch.
func (s *Kafka) Lag() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	lag := make(map[string]int64, len(s.lag))
	for p, n := range s.lag {
		lag[strconv.Itoa(p)] = n
	}
	return lag
}

// Close releases the source; the pipeline calls it after every fetched
// message has been settled. It stages each partition's final contiguous
// offset, and closes the reader, which commits what is staged and leaves the
// group. Messages still waiting in the delay queue are not committed: they
// come back after a restart. Close returns an error wrapping ctx.Err() if ctx
// ends first; the reader then finishes closing in the background. Calling
// Close again returns the first call's result.
func (s *Kafka) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Kafka) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	close(s.done)
	waiting := len(s.delayed)
	s.delayed = nil
	if s.wake != nil {
		s.wake()
	}
	s.mu.Unlock()
	if waiting > 0 {
		s.log.Info("kafka: closing with nacked messages waiting for redelivery; their offsets are not committed, they come back after a restart",
			"messages", waiting)
	}

	s.health.closing.Store(true)
	s.stop()
	if err := waitCtx(ctx, s.wg.Wait); err != nil {
		return fmt.Errorf("kafka: close: %w", err)
	}
	r := s.reader.Load() // set for good: its only writer, health.watch, has exited
	if r == nil {
		return nil // the topic was never seen: nothing fetched
	}

	// Stage every partition's final mark once more: commitLoop staged each
	// as it advanced, but a commit that failed at the end of a generation is
	// not retried by the reader.
	if marks := s.marks.final(nil); len(marks) > 0 {
		sctx, cancel := context.WithTimeout(ctx, kafkaStageTimeout)
		err := s.stage(sctx, r, marks)
		cancel()
		if err != nil {
			s.log.Warn("kafka: could not stage the final offsets; messages after the last commit come back after a restart",
				"err", err)
		}
	}
	if err := waitCtx(ctx, func() { _ = r.Close() }); err != nil {
		return fmt.Errorf("kafka: close reader: %w", err)
	}
	return nil
}

// commitLoop stages each partition's mark with the reader whenever it
// advances, until ctx ends. Staging only queues the offsets for the reader's
// commit loop, but it blocks while no generation runs (a rebalance, the
// brokers unreachable): it runs here so that an Ack never waits for it.
func (s *Kafka) commitLoop(ctx context.Context) {
	var marks []partitionMark
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.commitWake:
		}
		marks = s.marks.advanced(marks[:0])
		if len(marks) == 0 {
			continue
		}
		// A mark advances only for a message fetched from the reader.
		if err := s.stage(ctx, s.reader.Load(), marks); err != nil {
			s.marks.retry(marks) // staged on Close, if not before
			if ctx.Err() == nil {
				s.log.Debug("kafka: stage offsets", "err", err)
			}
		}
	}
}

// stage hands the marks to the reader to commit. CommitMessages commits one
// past each message's offset, so each mark is passed as the message before it.
func (s *Kafka) stage(ctx context.Context, r *kafka.Reader, marks []partitionMark) error {
	msgs := make([]kafka.Message, len(marks))
	for i, m := range marks {
		msgs[i] = kafka.Message{Topic: s.cfg.Topic, Partition: m.Partition, Offset: m.Offset - 1}
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("kafka: stage offsets: %w", err)
	}
	return nil
}

// finish marks d's offset finished and wakes commitLoop if its partition's
// mark advanced.
func (s *Kafka) finish(d *kafkaDelivery) error {
	if s.marks.finish(d.pending) {
		select {
		case s.commitWake <- struct{}{}:
		default: // already woken
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("kafka: ack %s after close: %w; it is redelivered after a restart", d.msg.ID, errKafkaClosed)
	}
	return nil
}

// delay queues d for redelivery at now+delay, and wakes a Fetch waiting for
// the reader when d is due before it would wake.
func (s *Kafka) delay(d *kafkaDelivery, delay time.Duration) error {
	due := time.Now().Add(max(delay, 0))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("kafka: nack %s after close: %w; it is redelivered after a restart", d.msg.ID, errKafkaClosed)
	}
	s.seq++
	s.delayed.push(delayedDelivery{due: due, seq: s.seq, d: d})
	if s.wake != nil && (s.wakeAt.IsZero() || due.Before(s.wakeAt)) {
		s.wake()
		s.wake = nil
	}
	return nil
}

// kafkaDelivery is one delivery of a fetched message, and its receipt. A
// redelivery after a Nack is a new kafkaDelivery sharing the first one's
// pending offset.
type kafkaDelivery struct {
	msg     shaper.Message
	src     *Kafka
	pending *pendingOffset // &first, or the first delivery's
	first   pendingOffset
	settled atomic.Bool
}

// Ack marks the message finished: its offset becomes committable once every
// earlier offset of its partition is finished too, and is committed within
// CommitInterval, at the next rebalance, or on Close.
func (d *kafkaDelivery) Ack(context.Context) error {
	if d.settled.Swap(true) {
		return ErrAlreadySettled
	}
	return d.src.finish(d)
}

// Nack queues the message for redelivery by Fetch once delay has passed (at
// once when delay <= 0). Its offset is not committed meanwhile.
func (d *kafkaDelivery) Nack(_ context.Context, delay time.Duration) error {
	if d.settled.Swap(true) {
		return ErrAlreadySettled
	}
	return d.src.delay(d, delay)
}

// delayedDelivery is a nacked message waiting in the delay queue.
type delayedDelivery struct {
	due time.Time
	seq uint64
	d   *kafkaDelivery
}

// delayQueue is a min-heap of nacked messages by due time, then nack order.
type delayQueue []delayedDelivery

func (q delayQueue) less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}

func (q *delayQueue) push(x delayedDelivery) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *delayQueue) pop() delayedDelivery {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = delayedDelivery{} // keep no settled delivery alive
	h = h[:last]
	for i := 0; ; {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, least) {
			least = l
		}
		if r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitCtx runs fn in a goroutine and waits for it until ctx ends.
func waitCtx(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
