package sinks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/shaper"
)

const (
	// kafkaBatchTimeout is the longest a record waits for others to join its
	// produce request. The pipeline's concurrent Sends that arrive within
	// it go out together; kafka-go's default of 1s would add a second to
	// every Send at a low rate.
	kafkaBatchTimeout = 5 * time.Millisecond
	// kafkaBatchBytes caps a batch at Kafka's default message.max.bytes
	// (1 MiB, plus 12 bytes of framing), so batching alone rarely makes a
	// broker with the default limit refuse a batch.
	kafkaBatchBytes = 1 << 20
	// kafkaMaxRecordBytes is the largest record sent at all: Kafka's default
	// socket.request.max.bytes (100 MiB). A broker closes the connection on a
	// larger request instead of answering, which would look retryable.
	kafkaMaxRecordBytes = 100 << 20
	// kafkaWriteTimeout bounds one produce request. It runs in kafka-go's
	// background, unbound by the caller's ctx, so it also bounds how long
	// Close waits for a write in flight.
	kafkaWriteTimeout = 10 * time.Second
)

// Kafka publishes each message as one record to one Kafka topic: as a
// pipeline sink (shaping one topic into another) and as the dead-letter
// target.
//
// The record's key is m.Key and its value is m.Payload, both unchanged. Every
// value of every name in m.Header becomes one record header, names in sorted
// order and the values of one name in their order. Records with a key are
// partitioned by the murmur2 hash of the key, as the Java client and
// franz-go do by default, so the records of one key stay on one partition,
// where Kafka keeps them in the order they were written; records without a
// key are spread at random.
//
// Send returns once every in-sync replica has the record (acks=all), or
// with the reason it could not be written. It makes one attempt: kafka-go
// does not retry on its own here, the core's retry policy does. Concurrent
// Sends are gathered for up to 5 ms into one produce request per partition.
// A Send whose ctx ends first returns the ctx error, and its record may
// still be written in the background: at-least-once delivery then counts on
// the retry publishing a duplicate, never on losing one.
//
// The topic must exist: a Kafka sink never creates one. An unknown topic is
// an ordinary, retryable error, since an operator may create it; the list of
// partitions is refreshed in the background every few seconds. Brokers that
// cannot be reached are reported as errors too, never as a hang beyond ctx.
//
// A record the broker refuses as too large (message.max.bytes, or the
// topic's max.message.bytes) is shaper.ErrMalformed. Since the broker judges
// a batch, not a record, a refused batch is not taken as the verdict on its
// records: each Send in it is tried again alone, and only a record refused
// on its own is malformed. A record over 100 MiB is refused without a
// request.
//
// Kafka is safe for concurrent use by multiple goroutines.
type Kafka struct {
	topic     string
	transport *kafka.Transport
	batched   *kafka.Writer // every Send goes here first
	alone     *kafka.Writer // one record per request, after a too-large batch

	aloneWrites atomic.Int64 // Sends tried again alone, for tests
}

var _ shaper.Sink = (*Kafka)(nil)

// NewKafka returns a publisher to cfg.Topic that identifies itself to the
// brokers as client id name. It connects lazily: brokers that are down when
// it runs make the first Sends fail, not NewKafka.
func NewKafka(cfg KafkaPublisherConfig, name string) (*Kafka, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers")
	}
	if cfg.Topic == "" {
		return nil, errors.New("kafka: no topic")
	}
	transport, err := kafkaconn.Transport(cfg.Config, name)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	// Ask for this topic's metadata only, not the whole cluster's, and never
	// with auto-creation.
	transport.MetadataTopics = []string{cfg.Topic}

	writer := func(batchSize int, batchBytes int64) *kafka.Writer {
		return &kafka.Writer{
			Addr:      kafka.TCP(cfg.Brokers...),
			Topic:     cfg.Topic,
			Transport: transport,
			// The Java client's default partitioner for keyed records.
			Balancer: kafka.Murmur2Balancer{},
			// The writer's literal default is RequireNone: no ack at all.
			RequiredAcks: kafka.RequireAll,
			// One attempt per Send; the core retries, with its backoff,
			// counting each attempt against the rate.
			MaxAttempts:            1,
			BatchSize:              batchSize,
			BatchBytes:             batchBytes,
			BatchTimeout:           kafkaBatchTimeout,
			WriteTimeout:           kafkaWriteTimeout,
			AllowAutoTopicCreation: false,
		}
	}
	return &Kafka{
		topic:     cfg.Topic,
		transport: transport,
		batched:   writer(0, kafkaBatchBytes), // 0: kafka-go's 100 records
		alone:     writer(1, kafkaMaxRecordBytes),
	}, nil
}

// Send writes m as one record and returns nil once every in-sync replica
// has it. Otherwise it returns why: an error wrapping shaper.ErrMalformed
// when the record is too large for the broker (marked shaper.NotSent when
// kafka-go refused it without a request).
func (k *Kafka) Send(ctx context.Context, m *shaper.Message) error {
	msg := kafka.Message{Key: m.Key, Value: m.Payload, Headers: recordHeaders(m.Header)}
	err := writeErr(k.batched.WriteMessages(ctx, msg))
	if errors.Is(err, kafka.MessageSizeTooLarge) {
		// Refused before sending (over the batch limit), or refused by the
		// broker as part of a batch: either way nothing was written, so
		// trying again alone cannot duplicate the record.
		k.aloneWrites.Add(1)
		err = writeErr(k.alone.WriteMessages(ctx, msg))
	}
	if err == nil {
		return nil
	}
	notSent := errors.As(err, new(kafka.MessageTooLargeError)) // refused by kafka-go
	if errors.Is(err, kafka.MessageSizeTooLarge) {
		err = fmt.Errorf("%w: record with a %d-byte value is too large: %w", shaper.ErrMalformed, len(m.Payload), err)
	}
	err = fmt.Errorf("kafka: publish to %s: %w", k.topic, err)
	if notSent {
		return shaper.NotSent(err)
	}
	return err
}

// writeErr returns the error of the one record written by a WriteMessages
// call: kafka-go reports a failed batch as WriteErrors, one per record,
// which errors.Is cannot look into.
func writeErr(err error) error {
	var werr kafka.WriteErrors
	if errors.As(err, &werr) && len(werr) == 1 {
		return werr[0]
	}
	return err
}

// recordHeaders turns message headers into record headers: one per value,
// names in sorted order so the same message always makes the same record.
func recordHeaders(h map[string][]string) []kafka.Header {
	if len(h) == 0 {
		return nil
	}
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	out := make([]kafka.Header, 0, n)
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			out = append(out, kafka.Header{Key: name, Value: []byte(v)})
		}
	}
	return out
}

// Close writes what is batched, waits for the writes in flight and closes
// the connections. Sends after Close fail. kafka-go's Writer cannot be cut
// short, so ctx does not bound it: each write is bounded by a 10s write
// timeout instead.
func (k *Kafka) Close(context.Context) error {
	err := errors.Join(k.batched.Close(), k.alone.Close())
	// A Writer closes only the transports it made itself.
	k.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("kafka: close: %w", err)
	}
	return nil
}
