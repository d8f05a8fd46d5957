package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/shaper"
)

const (
	// kafkaQueueMax bounds the messages the partition readers fetch ahead of
	// Fetch, all partitions together (at most the bucket's capacity; each
	// partition's reader gets its share, at least one). With kafkaMaxBytes
	// per partition fetch, it bounds the source's memory whatever the lag.
	kafkaQueueMax = 100
	// kafkaMaxBytes is the most bytes one fetch of one partition asks for
	// (kafka-go's default). A larger record still arrives: brokers return
	// the first record of a fetch whatever its size.
	kafkaMaxBytes = 1 << 20
	// kafkaGatherWait bounds how long Fetch, holding a message, waits for
	// more: long enough to take what the partition readers have already
	// queued, short enough to add no noticeable latency.
	kafkaGatherWait = time.Millisecond
	// kafkaErrorPause is how long a partition reader pauses after returning
	// an error, so that a failing reader cannot make it spin.
	kafkaErrorPause = 100 * time.Millisecond
	// kafkaReadBackoffMin and kafkaReadBackoffMax bound how long a partition
	// reader waits before fetching again after an error (kafka-go's
	// defaults).
	kafkaReadBackoffMin = 100 * time.Millisecond
	kafkaReadBackoffMax = time.Second
	// kafkaJoinBackoffMax caps how long the member waits before joining the
	// group again after a failed attempt; it waits HeartbeatInterval when
	// that is shorter.
	kafkaJoinBackoffMax = time.Second
	// kafkaSettleWaitMax caps how long the end of a generation waits for
	// the messages it handed out to settle before it commits; it waits a
	// quarter of the rebalance or session timeout when that is shorter, so
	// the member still rejoins in time.
	kafkaSettleWaitMax = 5 * time.Second
	// kafkaRequestTimeout bounds one commit, or one read of the committed
	// offsets, at the group coordinator (kafka-go's consumer group uses 5s).
	kafkaRequestTimeout = 5 * time.Second
	// kafkaRestoreAttempts is how often a partition reader tries to read the
	// commit metadata before it starts without it.
	kafkaRestoreAttempts = 3
)

// errKafkaClosed is returned by Fetch, Ready and late receipts after Close.
var errKafkaClosed = errors.New("kafka: source closed")

// Kafka is a shaper.Source that consumes one topic as a member of a consumer
// group, on segmentio/kafka-go's ConsumerGroup. Each generation of the group
// assigns this member some of the topic's partitions; the source reads each
// of them with its own partition Reader, from the group's committed offset
// (or the start offset when there is none), for as long as the generation
// runs. Members of one group split the topic's partitions.
//
// # Commits
//
// Messages finish out of order, so Kafka commits per partition the highest
// contiguous finished offset: the lowest offset fetched and not yet acked, or
// one past the last one fetched when all are acked (see commitTracker). An
// Ack makes its offset committable at once. The source commits, with the
// generation that assigned the partition, every CommitInterval while acks
// come (a failed commit is tried again after CommitInterval), when the
// generation ends (a rebalance, or Close), and never an offset past an
// unfinished message. A crash loses nothing: every message not acked, and
// those acked after the last commit, are redelivered to the group. Commits
// go straight to the group's coordinator, looked up once and again only when
// a commit to it fails (see groupCoordinator).
//
// Each commit also stores, in the metadata Kafka keeps beside a committed
// offset, which offsets above it are finished (see kafka_metadata.go; at
// most 4 KiB of it). Whoever reads the partition next from that commit, this
// member after a restart or another after a rebalance, skips them: a message
// without an outcome (a retry pending at a drain, a nack) brings back itself
// and the other unfinished ones, not everything its partition finished
// after it.
//
// # Rebalances
//
// When a generation ends, every message fetched in it reports Revoked
// (shaper.Revocable) until the next generation says who owns its partition:
// the pipeline sends none of them, and nacks them. Before it lets the member
// rejoin, the source waits a moment (a quarter of the rebalance or session
// timeout, at most 5s) for the messages it handed out to settle, so that
// requests in flight finish, and commits every partition's mark with the
// ending generation, which the group accepts while it rebalances: the next
// owner of a partition starts after everything this member finished.
//
// A partition that the next generation assigns to this member again is kept:
// its messages report Revoked false again, those nacked meanwhile come back
// from the delay queue, and its reader resumes after the last offset fetched,
// so nothing of it is fetched or delivered twice. A partition given to
// another member is revoked for good: its messages report Revoked, a Nack
// drops them and an Ack commits nothing; the new owner delivers them, and
// skips those the commit's metadata has as finished. A rebalance thus
// duplicates only what finished here after its commit (a request that
// outlasted the wait). A partition is kept only across
// consecutive generations of the same member, and only when the group's
// committed offset has not passed its mark; otherwise it is revoked and read
// again from the committed offset.
//
// # Pauses
//
// A receipt's Pause (shaper.Pausable) stops its partition's reader handing
// out messages until every pause of the partition has been resumed, while
// the other partitions keep flowing; kafka-go stops fetching the partition
// once the reader's queue is full. Commits go on, and a rebalance ends the
// paused reader as any other.
//
// # Redelivery
//
// Nack(delay) redelivers by itself: the message waits in the session's
// delay queue (delayQueue) and Fetch returns it again, with the same ID,
// once delay has passed, before any new message. Its offset stays unfinished meanwhile, so
// the partition's commits wait for it. On Close, a message still in the
// delay queue is not committed: it comes back after a restart, from the
// broker, without the messages finished after it.
//
// Kafka is safe for concurrent use by multiple goroutines; concurrent Fetch
// calls take turns.
//
// # Dead letters
//
// With DeadLetters, the topic holds shaper's dead letters: each of the
// pipeline's own (Shaper-Pipeline is cfg.Pipeline) is handed out as the
// message it was (AsDeadLetter), with its first ID and without the
// Shaper-* headers. One of another pipeline, or of none, and one written
// without its payload are not handed out: the source acks each itself, so
// its offset commits, and logs it.
//
// Kafka itself only hands out messages: a kafkaSession runs the group
// membership, its generations and commits, and holds the nacked messages;
// a commitTracker, a value without I/O, says what each partition may commit
// (kafka_commit.go, with the metadata codec of kafka_metadata.go); a
// groupCoordinator sends the commits; a partitionFetcher reads the
// partitions the session claims. The one hook into kafka-go's internals,
// and what it relies on, is in kafka_internals.go.
type Kafka struct {
	log      *slog.Logger
	health   *kafkaHealth
	session  *kafkaSession
	fetcher  *partitionFetcher
	fetching fetchTurn       // concurrent Fetch calls take turns
	others   *otherPipelines // with DeadLetters
	stop     context.CancelFunc
	watching sync.WaitGroup // health.watch

	closeOnce sync.Once
	closeErr  error
}

var (
	_ shaper.Source      = (*Kafka)(nil)
	_ shaper.LagReporter = (*Kafka)(nil)
	_ shaper.Revocable   = (*kafkaDelivery)(nil)
	_ shaper.Pausable    = (*kafkaDelivery)(nil)
)

// NewKafka returns a source that consumes cfg.Topic in group cfg.Group. cfg
// must have been validated and defaulted. capacity is the pipeline's bucket
// capacity, which bounds how much the partition readers fetch ahead; name is
// the Kafka client id.
//
// Brokers that are down, a missing topic or failed authentication do not
// fail NewKafka: the source keeps trying in the background and Ready says
// why it is not ready. The member joins the group once the topic is first
// seen, so that it is assigned the topic's partitions.
func NewKafka(cfg KafkaConfig, capacity int, name string, log *slog.Logger) (*Kafka, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("kafka: capacity %d: must be >= 1", capacity)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", "kafka", "topic", cfg.Topic, "group", cfg.Group)
	if err := checkPipeline(cfg.DeadLetters, cfg.Pipeline); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	dialer, err := kafkaconn.Dialer(cfg.Config, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	health := newKafkaHealth(cfg, dialer, log)
	transport, err := kafkaconn.Transport(cfg.Config, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	transport.MetadataTopics = []string{cfg.Topic}
	groupCfg, err := kafkaGroupConfig(cfg, dialer, health)
	if err != nil {
		return nil, err
	}
	readerCfg, err := kafkaReaderConfig(cfg, dialer, health)
	if err != nil {
		return nil, err
	}
	fetcher := &partitionFetcher{
		readerCfg: readerCfg,
		queue:     min(capacity, kafkaQueueMax),
		health:    health,
		incoming:  make(chan kafkaFetched),
	}
	s := &Kafka{
		log:      log,
		health:   health,
		session:  newKafkaSession(cfg, groupCfg, transport, fetcher, health, log),
		fetcher:  fetcher,
		fetching: newFetchTurn(),
		others:   &otherPipelines{pipeline: cfg.Pipeline, log: log},
	}
	fetcher.session = s.session
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.watching.Go(func() { health.watch(ctx, s.session.start) })
	return s, nil
}

// kafkaGroupConfig returns the consumer group's config for cfg, validated.
func kafkaGroupConfig(cfg KafkaConfig, dialer *kafka.Dialer, health *kafkaHealth) (kafka.ConsumerGroupConfig, error) {
	start := kafka.FirstOffset
	if cfg.Start == StartLatest {
		start = kafka.LastOffset
	}
	gc := kafka.ConsumerGroupConfig{
		ID:                cfg.Group,
		Brokers:           cfg.Brokers,
		Dialer:            dialer,
		Topics:            []string{cfg.Topic},
		HeartbeatInterval: cfg.HeartbeatInterval,
		SessionTimeout:    cfg.SessionTimeout,
		RebalanceTimeout:  cfg.RebalanceTimeout,
		JoinGroupBackoff:  min(cfg.HeartbeatInterval, kafkaJoinBackoffMax),
		// Not WatchPartitionChanges: kafka-go's watcher ends a generation
		// at once when the topic is missing, and the member then rejoins
		// in a busy loop (v0.4.51). Partitions added to the topic are
		// picked up at the next rebalance.
		//
		// A partition the group has no offset for starts here: kafka-go
		// puts StartOffset in the generation's assignment.
		StartOffset: start,
		Logger:      kafka.LoggerFunc(health.readerInfo),
		ErrorLogger: kafka.LoggerFunc(health.readerError),
	}
	check := gc // Validate fills in defaults; NewConsumerGroup validates again
	if err := check.Validate(); err != nil {
		return gc, fmt.Errorf("kafka: consumer group config: %w", err)
	}
	return gc, nil
}

// kafkaReaderConfig returns a partition reader's config for cfg, validated;
// the fetcher sets Partition and QueueCapacity.
func kafkaReaderConfig(cfg KafkaConfig, dialer *kafka.Dialer, health *kafkaHealth) (kafka.ReaderConfig, error) {
	rc := kafka.ReaderConfig{
		Brokers:  cfg.Brokers,
		Topic:    cfg.Topic,
		Dialer:   dialer,
		MinBytes: 1,
		MaxBytes: kafkaMaxBytes,
		MaxWait:  cfg.MaxWait,
		// Lag is computed from each fetched message's high watermark.
		ReadLagInterval: -1,
		ReadBackoffMin:  kafkaReadBackoffMin,
		ReadBackoffMax:  kafkaReadBackoffMax,
		Logger:          kafka.LoggerFunc(health.readerInfo),
		ErrorLogger:     kafka.LoggerFunc(health.readerError),
	}
	check := rc
	check.QueueCapacity = 1
	if err := check.Validate(); err != nil {
		return rc, fmt.Errorf("kafka: reader config: %w", err)
	}
	return rc, nil
}

// Fetch blocks until at least one message is available or ctx ends, and
// returns at most max messages: nacked messages whose delay has passed first,
// then new ones from the partition readers, gathering what they have already
// fetched without waiting for more. It returns ctx.Err() when ctx ends before
// a message is in hand; a message a reader had ready stays with the reader.
//
// While the brokers are unreachable, or the group is rebalancing, Fetch waits
// (Ready says why). It returns an error only after Close.
func (s *Kafka) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if err := s.fetching.start(ctx, "kafka", max); err != nil {
		return nil, err
	}
	defer s.fetching.done()

	var out []*shaper.Message
	for len(out) == 0 {
		var wakeAt time.Time
		var err error
		out, wakeAt, err = s.session.redeliver(out, time.Now(), max)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			break
		}
		if err := s.wait(ctx, wakeAt, &out); err != nil {
			return nil, err
		}
	}
	return s.gather(ctx, out, max), nil
}

// wait waits for a message from the partition readers, which it appends to
// out, or until wakeAt (when not zero), a Nack or a new generation makes a
// nacked message due, ctx ends or Close.
func (s *Kafka) wait(ctx context.Context, wakeAt time.Time, out *[]*shaper.Message) error {
	var due <-chan time.Time
	if !wakeAt.IsZero() {
		t := time.NewTimer(time.Until(wakeAt))
		defer t.Stop()
		due = t.C
	}
	select {
	case f := <-s.fetcher.incoming:
		if d := s.hold(f); d != nil {
			*out = append(*out, &d.msg)
		}
		return nil
	case <-due:
		return nil
	case <-s.session.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.session.done:
		return errKafkaClosed
	}
}

// gather appends to out what the partition readers have ready, up to max in
// all, waiting at most kafkaGatherWait.
func (s *Kafka) gather(ctx context.Context, out []*shaper.Message, max int) []*shaper.Message {
	if len(out) >= max {
		return out
	}
	t := time.NewTimer(kafkaGatherWait)
	defer t.Stop()
	for len(out) < max {
		select {
		case f := <-s.fetcher.incoming:
			if d := s.hold(f); d != nil {
				out = append(out, &d.msg)
			}
		case <-t.C:
			return out
		case <-ctx.Done():
			return out
		}
	}
	return out
}

// hold has the session track f's message as fetched and unfinished, and
// returns its delivery, or nil when the session refuses it (see admit) or,
// with DeadLetters, when it is a dead letter of another pipeline or one
// written without its payload: that one is finished here, so its offset
// commits, and logged.
func (s *Kafka) hold(f kafkaFetched) *kafkaDelivery {
	m := f.msg
	d := &kafkaDelivery{session: s.session, claim: f.claim}
	d.first.partition, d.first.offset = m.Partition, m.Offset
	d.pending = &d.first
	if !s.session.admit(f.gen, d) {
		return nil
	}
	s.fetcher.recordLag(f.claim, m)
	d.msg = kafkaMessage(m, d)
	s.health.fetched()
	if s.session.cfg.DeadLetters {
		if !s.others.own(&d.msg) {
			_ = d.Ack(context.Background()) // fails only after Close: then it comes back after a restart
			return nil
		}
		record := d.msg.ID
		if _, omitted := AsDeadLetter(&d.msg); omitted {
			s.log.Warn("kafka: dead letter written without its payload passed over; replay it from its source",
				"record", record, "shaper_source", d.msg.Origin)
			_ = d.Ack(context.Background()) // fails only after Close: then it comes back after a restart
			return nil
		}
	}
	return d
}

// Ready returns nil while the source is fetching normally, and otherwise why
// not, such as `kafka: topic "x" not found`, `kafka: brokers unreachable:
// dial tcp 127.0.0.1:1: connect: connection refused`, `kafka: SASL
// authentication failed at 127.0.0.1:9092: user "u", mechanism PLAIN: ...` or
// an error the consumer group or a partition reader reported. See
// kafkaHealth.
func (s *Kafka) Ready() error {
	if s.session.isClosed() {
		return errKafkaClosed
	}
	return s.health.ready()
}

// Lag returns, per partition this member holds (its number as a string),
// how many messages lie between the last one fetched from it and the
// partition's end, as of that fetch. A partition a rebalance gave to another
// member is left out: that member reports it.
func (s *Kafka) Lag() map[string]int64 {
	return s.session.lag()
}

// Close releases the source; the pipeline calls it after every fetched
// message has been settled. It leaves the consumer group, which ends the
// generation: the generation commits each partition's final contiguous mark
// (see endGeneration) before the member leaves. Messages still waiting in the
// delay queue are not committed: they come back after a restart. Close
// returns an error wrapping ctx.Err() if ctx ends first; the group then
// finishes closing in the background. Calling Close again returns the first
// call's result.
func (s *Kafka) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Kafka) close(ctx context.Context) error {
	if waiting := s.session.close(); waiting > 0 {
		s.log.Info("kafka: closing with nacked messages waiting for redelivery; their offsets are not committed, they come back after a restart",
			"messages", waiting)
	}
	s.health.closing.Store(true)
	s.stop()
	if err := waitCtx(ctx, s.watching.Wait); err != nil {
		return fmt.Errorf("kafka: close: %w", err)
	}
	// The group is set for good: its only writer, health.watch, has exited.
	if err := waitCtx(ctx, s.session.leave); err != nil {
		return fmt.Errorf("kafka: close consumer group: %w", err)
	}
	return nil
}

// kafkaDelivery is one delivery of a fetched message, and its receipt. A
// redelivery after a Nack is a new kafkaDelivery sharing the first one's
// claim and pending offset.
type kafkaDelivery struct {
	msg     shaper.Message
	session *kafkaSession
	claim   *kafkaClaim
	pending *pendingOffset // &first, or the first delivery's
	first   pendingOffset
	settled atomic.Bool
}

// Ack marks the message finished: its offset becomes committable once every
// earlier offset of its partition is finished too, and is committed within
// CommitInterval, at the next rebalance, or on Close. The Ack of a message
// whose partition was revoked commits nothing: the partition's new owner
// delivers it again.
func (d *kafkaDelivery) Ack(context.Context) error {
	if d.settled.Swap(true) {
		return ErrAlreadySettled
	}
	return d.session.finish(d)
}

// Nack queues the message for redelivery by Fetch once delay has passed (at
// once when delay <= 0), while its partition stays with this member. Its
// offset is not committed meanwhile. The Nack of a message whose partition
// was revoked drops it: the partition's new owner delivers it.
func (d *kafkaDelivery) Nack(_ context.Context, delay time.Duration) error {
	if d.settled.Swap(true) {
		return ErrAlreadySettled
	}
	return d.session.delay(d, delay)
}

// Revoked reports whether the message's partition is not this member's at
// the moment: from the end of the generation that fetched it until the next
// one assigns the partition to this member again, and for good when it
// assigns it to another member.
func (d *kafkaDelivery) Revoked() bool {
	return d.claim.state.Load() != claimOwned
}

// Pause stops the reader of the message's partition handing Fetch more of
// it until the returned resume is called; other partitions keep flowing.
// Pauses nest: the partition stays paused until every resume has been
// called, and calling one resume again does nothing. What still comes of the
// partition while it is paused: the one message its reader may be handing
// over as Pause is called, and its nacked messages once their delay has
// passed. A pause holds back neither commits, Ack and Nack, nor a
// rebalance: a partition the member keeps stays paused, and the pause of a
// revoked partition holds back nothing.
func (d *kafkaDelivery) Pause() (resume func()) {
	d.claim.pause()
	var once sync.Once
	return func() { once.Do(d.claim.resume) }
}

// notify wakes the waiter on ch, a channel of size 1, unless it is woken
// already.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error { return sleepUnless(ctx, nil, d) }

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
