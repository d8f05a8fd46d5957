package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/shaper"
)

// kafkaRangeMaxWait is the longest one fetch of a replay's partition waits
// at the broker for records. A replay reads what is there already, so it
// rarely waits; it bounds how long closing a partition reader takes.
const kafkaRangeMaxWait = 250 * time.Millisecond

// errKafkaRangeClosed is returned by Fetch and Ready after Close.
var errKafkaRangeClosed = errors.New("kafka: replay closed")

// KafkaRange is a Replay of a Kafka topic: it reads each partition's range
// once, from its first offset to the one past it, without a consumer group,
// so it commits nothing anywhere and moves no group's position. The ranges
// are fixed when it is made: Bound's times are looked up by record
// timestamp (the first offset stored at or after the time), the log's end
// is each partition's high watermark then. Records produced later are not
// read.
//
// Each partition with something to read has its own kafka-go Reader, which
// hands Fetch its records one at a time; a receipt's Pause stops its
// partition handing over more until resumed, while the others flow. Fetch
// returns io.EOF once every partition has been read to its end and handed
// out. Receipts settle only in the replay's books (see rangeBooks): an Ack
// finishes a message, a Nack leaves it for a resumed replay; nothing is
// redelivered.
//
// A partition is read to its end once its reader has read the record at
// the range's last offset, or one past it (the last offsets may hold no
// record, after compaction). kafka-go (v0.4.51) returns transaction markers
// as records, so a range ending in one ends too; like the live source, the
// replay hands such markers out as messages.
//
// KafkaRange is safe for concurrent use; concurrent Fetch calls take turns.
type KafkaRange struct {
	log      *slog.Logger
	books    *rangeBooks
	parts    []*rangePartition    // by partition number, all of the topic's
	incoming chan *shaper.Message // unbuffered: a partition reader hands Fetch one message
	drained  chan struct{}        // closed once every partition has been read to its end
	left     atomic.Int32         // partitions not read to their end yet
	fetching fetchTurn
	done     chan struct{} // closed by Close
	stop     context.CancelFunc
	readers  sync.WaitGroup

	mu   sync.Mutex
	errs map[int]error // by partition: its reader's last error, until a record comes

	closeOnce sync.Once
	closeErr  error
}

var (
	_ Replay          = (*KafkaRange)(nil)
	_ shaper.Pausable = (*rangeReceipt)(nil)
)

// rangePartition is one partition's range, [from, end).
type rangePartition struct {
	partition int
	from, end int64
	books     *placeBooks
	pauses    *pauses
}

// NewKafkaRange returns a replay of topic over the range opts gives, on the
// brokers of cfg. It looks up the topic's partitions and each one's range
// under ctx, and fails when it cannot: a missing topic, unreachable
// brokers, a seq:N bound (JetStream's). Per partition the range starts at
// opts.From (the log's start when From is BoundLog, or an offset bound
// does not name the partition) and ends before opts.To (the high watermark
// when To is BoundLog, or does not name it); offsets are clamped to the
// log, and a time with no record at or after it is the high watermark.
//
// capacity is the pipeline's bucket capacity, which bounds how much the
// partition readers fetch ahead; name is the Kafka client id. The readers
// start at once; Close stops them.
func NewKafkaRange(ctx context.Context, cfg kafkaconn.Config, topic string, capacity int, opts ReplayOptions, name string, log *slog.Logger) (*KafkaRange, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("kafka: replay: capacity %d: must be >= 1", capacity)
	}
	for _, b := range []struct {
		flag  string
		bound Bound
	}{{"--from", opts.From}, {"--to", opts.To}} {
		if b.bound.Kind == BoundSeq {
			return nil, fmt.Errorf("kafka: replay: %s seq:%d: seq:N is for JetStream; use offset:N or a time", b.flag, b.bound.Seq)
		}
	}
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("kafka: replay: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", "kafka", "topic", topic, "replay", true)
	dialer, err := kafkaconn.Dialer(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	transport, err := kafkaconn.Transport(cfg, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	transport.MetadataTopics = []string{topic}
	defer transport.CloseIdleConnections() // only the lookups use it
	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: transport}
	ranges, err := kafkaRanges(ctx, client, topic, opts)
	if err != nil {
		return nil, err
	}

	s := &KafkaRange{
		log:      log,
		books:    newRangeBooks(opts, formatOffsets),
		incoming: make(chan *shaper.Message),
		drained:  make(chan struct{}),
		fetching: newFetchTurn(),
		done:     make(chan struct{}),
		errs:     map[int]error{},
	}
	reading := s.addPartitions(ranges)
	configs, err := s.readerConfigs(cfg, topic, dialer, capacity, reading)
	if err != nil {
		return nil, err
	}
	s.start(reading, configs)
	log.Info("kafka: replaying", "partitions", len(ranges), "reading", len(reading), "from", formatRanges(ranges, true), "to", formatRanges(ranges, false))
	return s, nil
}

// addPartitions adds a partition to s for each range, and returns those
// with something to read.
func (s *KafkaRange) addPartitions(ranges []kafkaPartitionRange) (reading []*rangePartition) {
	for _, r := range ranges {
		rp := &rangePartition{partition: r.partition, from: r.from, end: max(r.end, r.from), pauses: newPauses()}
		rp.books = s.books.place(strconv.Itoa(r.partition), r.from, r.end)
		s.parts = append(s.parts, rp)
		if rp.from < rp.end {
			reading = append(reading, rp)
		}
	}
	return reading
}

// readerConfigs returns the kafka-go Reader config of each partition of
// reading, in that order. The partitions share the bucket's capacity as
// the readers' queue: it bounds how much they fetch ahead.
func (s *KafkaRange) readerConfigs(cfg kafkaconn.Config, topic string, dialer *kafka.Dialer, capacity int, reading []*rangePartition) ([]kafka.ReaderConfig, error) {
	queue := max(min(capacity, kafkaQueueMax)/max(len(reading), 1), 1)
	configs := make([]kafka.ReaderConfig, len(reading))
	for i, rp := range reading {
		configs[i] = kafka.ReaderConfig{
			Brokers:         cfg.Brokers,
			Topic:           topic,
			Partition:       rp.partition,
			Dialer:          dialer,
			QueueCapacity:   queue,
			MinBytes:        1,
			MaxBytes:        kafkaMaxBytes,
			MaxWait:         kafkaRangeMaxWait,
			ReadLagInterval: -1,
			ReadBackoffMin:  kafkaReadBackoffMin,
			ReadBackoffMax:  kafkaReadBackoffMax,
			Logger:          kafka.LoggerFunc(s.readerInfo),
			ErrorLogger:     kafka.LoggerFunc(func(format string, args ...any) { s.readerError(rp.partition, format, args...) }),
		}
		if err := configs[i].Validate(); err != nil { // NewReader would panic
			return nil, fmt.Errorf("kafka: replay: reader config of partition %d: %w", rp.partition, err)
		}
	}
	return configs, nil
}

// start starts a reader of each partition of reading, with its config
// (configs[i] is reading[i]'s), until Close; with none to read, the range
// is drained at once.
func (s *KafkaRange) start(reading []*rangePartition, configs []kafka.ReaderConfig) {
	s.left.Store(int32(len(reading)))
	if len(reading) == 0 {
		close(s.drained)
	}
	readCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	for i, rp := range reading {
		s.readers.Go(func() { s.read(readCtx, rp, configs[i]) })
	}
}

// kafkaPartitionRange is a partition's range as looked up: [from, end).
type kafkaPartitionRange struct {
	partition int
	from, end int64
}

// kafkaRanges looks up topic's partitions and the range opts gives each,
// in partition order.
func kafkaRanges(ctx context.Context, c *kafka.Client, topic string, opts ReplayOptions) ([]kafkaPartitionRange, error) {
	partitions, err := topicPartitions(ctx, c, topic)
	if err != nil {
		return nil, err
	}
	if err := checkBoundPartitions(topic, partitions, opts); err != nil {
		return nil, err
	}
	// One request per kind of lookup: kafka-go merges the answers by
	// partition, so two timestamps in one request could not be told apart.
	edges, err := listOffsets(ctx, c, topic, partitions, kafka.FirstOffsetOf, kafka.LastOffsetOf)
	if err != nil {
		return nil, err
	}
	fromTimes, err := offsetsAtTime(ctx, c, topic, partitions, opts.From)
	if err != nil {
		return nil, err
	}
	toTimes, err := offsetsAtTime(ctx, c, topic, partitions, opts.To)
	if err != nil {
		return nil, err
	}

	out := make([]kafkaPartitionRange, 0, len(partitions))
	for _, p := range partitions {
		logStart, hwm := edges[p].FirstOffset, edges[p].LastOffset
		pick := func(b Bound, times map[int]int64, dflt int64) int64 {
			switch b.Kind {
			case BoundTime:
				if off := times[p]; off >= 0 {
					return min(max(off, logStart), hwm)
				}
				return hwm
			case BoundOffset:
				if off, ok := b.offsetOf(p); ok {
					return min(max(off, logStart), hwm)
				}
			}
			return dflt
		}
		out = append(out, kafkaPartitionRange{partition: p, from: pick(opts.From, fromTimes, logStart), end: pick(opts.To, toTimes, hwm)})
	}
	return out, nil
}

// topicPartitions looks up the partitions of topic, sorted; a topic that
// has none is not found.
func topicPartitions(ctx context.Context, c *kafka.Client, topic string) ([]int, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("kafka: replay: metadata of topic %q: %w", topic, err)
	}
	var partitions []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
			break
		}
		if t.Error != nil {
			return nil, fmt.Errorf("kafka: replay: metadata of topic %q: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			partitions = append(partitions, p.ID)
		}
	}
	if len(partitions) == 0 {
		return nil, fmt.Errorf("kafka: replay: topic %q not found", topic)
	}
	slices.Sort(partitions)
	return partitions, nil
}

// checkBoundPartitions refuses an offset bound of opts that names a
// partition topic does not have (partitions, sorted).
func checkBoundPartitions(topic string, partitions []int, opts ReplayOptions) error {
	for _, b := range []struct {
		flag  string
		bound Bound
	}{{"--from", opts.From}, {"--to", opts.To}} {
		for _, p := range slices.Sorted(maps.Keys(b.bound.Offsets)) {
			if _, ok := slices.BinarySearch(partitions, p); !ok {
				return fmt.Errorf("kafka: replay: %w", &BoundError{Flag: b.flag,
					Problem: fmt.Sprintf("offset:%d=%d: topic %q has no partition %d (its %d partitions are %s)", p, b.bound.Offsets[p], topic, p, len(partitions), partitionList(partitions))})
			}
		}
	}
	return nil
}

// offsetsAtTime looks up, when b is a time, the offset of the first record
// at or after it in each partition, -1 where there is none; for another
// bound it returns nil.
func offsetsAtTime(ctx context.Context, c *kafka.Client, topic string, partitions []int, b Bound) (map[int]int64, error) {
	if b.Kind != BoundTime {
		return nil, nil
	}
	got, err := listOffsets(ctx, c, topic, partitions, func(p int) kafka.OffsetRequest { return kafka.TimeOffsetOf(p, b.Time) })
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(got))
	for p, po := range got {
		out[p] = -1 // no record at or after the time
		for off := range po.Offsets {
			out[p] = off
		}
	}
	return out, nil
}

// partitionList is sorted partitions for a message: "0 to 3" when they
// run without a gap, else each.
func partitionList(partitions []int) string {
	if n := len(partitions); partitions[n-1]-partitions[0] == n-1 {
		return fmt.Sprintf("%d to %d", partitions[0], partitions[n-1])
	}
	s := make([]string, len(partitions))
	for i, p := range partitions {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// listOffsets asks for each partition the offsets reqs make of it, and
// returns the answers by partition; it fails on any partition's error.
func listOffsets(ctx context.Context, c *kafka.Client, topic string, partitions []int, reqs ...func(p int) kafka.OffsetRequest) (map[int]kafka.PartitionOffsets, error) {
	var rs []kafka.OffsetRequest
	for _, p := range partitions {
		for _, req := range reqs {
			rs = append(rs, req(p))
		}
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: rs}})
	if err != nil {
		return nil, fmt.Errorf("kafka: replay: list offsets of topic %q: %w", topic, err)
	}
	out := make(map[int]kafka.PartitionOffsets, len(partitions))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka: replay: list offsets of topic %q partition %d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("kafka: replay: list offsets of topic %q: no answer for partition %d", topic, p)
		}
	}
	return out, nil
}

// formatRanges is the --from (from) or --to of ranges, for the log.
func formatRanges(ranges []kafkaPartitionRange, from bool) string {
	pos := make(map[string]int64, len(ranges))
	for _, r := range ranges {
		pos[strconv.Itoa(r.partition)] = r.end
		if from {
			pos[strconv.Itoa(r.partition)] = r.from
		}
	}
	return formatOffsets(pos)
}

// read hands the records of rp's range, read with a reader of config rc,
// to Fetch, until the range's end or ctx. Records the books pass over (see
// rangeBooks.read) are not handed out.
func (s *KafkaRange) read(ctx context.Context, rp *rangePartition, rc kafka.ReaderConfig) {
	r := kafka.NewReader(rc) // rc passed Validate in NewKafkaRange
	defer func() {
		_ = r.Close() // waits out the fetch in flight: at most kafkaRangeMaxWait
	}()
	if err := r.SetOffset(rp.from); err != nil { // fails only on a closed reader
		s.readerFailed(rp.partition, fmt.Errorf("set offset %d: %w", rp.from, err))
		return
	}
	failed := func(err error) { s.readerFailed(rp.partition, err) }
	for {
		m, ok := fetchMessage(ctx, r, failed)
		if !ok {
			return
		}
		s.readerFetched(rp.partition)
		if m.Offset >= rp.end {
			break // the range's last offsets hold no record (transaction markers, compaction)
		}
		msg := kafkaMessage(m, nil)
		if out := s.books.read(rp.books, m.Offset, &msg, rp.pauses.pause); out != nil && !s.hand(ctx, rp, out) {
			return // the books have it unfinished: a resumed replay reads it again
		}
		if m.Offset >= rp.end-1 {
			break
		}
	}
	if s.left.Add(-1) == 0 {
		close(s.drained)
	}
}

// hand hands m to Fetch, and reports whether it did: not when ctx ends
// first. While rp is paused it waits, without handing m over, until it is
// resumed; meanwhile kafka-go fills the reader's queue and then stops
// fetching.
func (s *KafkaRange) hand(ctx context.Context, rp *rangePartition, m *shaper.Message) bool {
	return handOver(ctx, s.incoming, m, rp.pauses.state)
}

// Fetch blocks until at least one message is available or ctx ends, and
// returns at most max messages, gathering what the partition readers have
// ready without waiting for more. It returns ctx.Err() when ctx ends before
// a message is in hand (a message a reader had ready stays with the
// reader), and io.EOF once every partition has been read to its end and
// handed out.
func (s *KafkaRange) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	if err := s.fetching.start(ctx, "kafka", max); err != nil {
		return nil, err
	}
	defer s.fetching.done()
	select {
	case <-s.done:
		return nil, errKafkaRangeClosed
	default:
	}
	var out []*shaper.Message
	select {
	case m := <-s.incoming:
		out = append(out, m)
	case <-s.drained:
		s.books.exhausted()
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, errKafkaRangeClosed
	}
	t := time.NewTimer(kafkaGatherWait)
	defer t.Stop()
	for len(out) < max {
		select {
		case m := <-s.incoming:
			out = append(out, m)
		case <-t.C:
			return out, nil
		case <-s.drained:
			return out, nil
		case <-ctx.Done():
			return out, nil
		}
	}
	return out, nil
}

// Ready returns nil while the partition readers read normally, and
// otherwise the error a reader met last (until it reads a record again).
func (s *KafkaRange) Ready() error {
	select {
	case <-s.done:
		return errKafkaRangeClosed
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rp := range s.parts {
		if err := s.errs[rp.partition]; err != nil {
			return err
		}
	}
	return nil
}

// Progress returns the replay's counts so far.
func (s *KafkaRange) Progress() ReplayProgress { return s.books.Progress() }

// Resume returns the --from and --to of a replay of what is left:
// offset:P=N for every partition.
func (s *KafkaRange) Resume() (from, to string) { return s.books.Resume() }

// Close stops the partition readers and waits for them, or returns an
// error wrapping ctx.Err() if ctx ends first. It commits nothing: there is
// nothing to commit. Receipts still settle in the books afterwards, so
// Progress and Resume count them. Calling Close again returns the first
// call's result.
func (s *KafkaRange) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.stop()
		if err := waitCtx(ctx, s.readers.Wait); err != nil {
			s.closeErr = fmt.Errorf("kafka: replay: close: %w", err)
		}
	})
	return s.closeErr
}

// readerFailed records err, which the reader of partition returned.
func (s *KafkaRange) readerFailed(partition int, err error) {
	s.mu.Lock()
	s.errs[partition] = fmt.Errorf("kafka: replay: partition %d: %w", partition, err)
	s.mu.Unlock()
}

// readerFetched records that the reader of partition read a record.
func (s *KafkaRange) readerFetched(partition int) {
	s.mu.Lock()
	delete(s.errs, partition)
	s.mu.Unlock()
}

// readerInfo is kafka-go's Logger, at debug level.
func (s *KafkaRange) readerInfo(format string, args ...any) {
	if strings.HasPrefix(format, "no messages received from kafka within the allocated time") {
		return
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("kafka-go: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

// readerError is the ErrorLogger of partition's reader: kafka-go retries
// what fails and only logs it, so the error makes the replay not ready
// until the reader reads a record again. A reader being closed is not an
// error.
func (s *KafkaRange) readerError(partition int, format string, args ...any) {
	text := strings.TrimSpace(fmt.Sprintf(format, args...))
	s.log.Debug("kafka-go: " + text)
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, context.Canceled) {
			return
		}
	}
	s.readerFailed(partition, errors.New(text))
}
