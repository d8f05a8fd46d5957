package embedded

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is kfake, franz-go's in-process Kafka, with one broker on
// 127.0.0.1 and a free port, holding its data in memory. It is safe for
// concurrent use; Close ends it.
type Kafka struct {
	c *kfake.Cluster
}

// StartKafka starts the cluster with topics, each with partitions
// partitions.
func StartKafka(partitions int32, topics ...string) (*Kafka, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	return &Kafka{c: c}, nil
}

// Addrs are the brokers' addresses, host:port.
func (k *Kafka) Addrs() []string { return k.c.ListenAddrs() }

// Publish produces n records to topic, round robin over its partitions,
// record i with the key and value record(i) returns, and waits until the
// broker has acked every one (acks=all) or ctx ends; see PublishMessages.
func (k *Kafka) Publish(ctx context.Context, topic string, n int, record func(i int) (key, value []byte)) error {
	return k.PublishMessages(ctx, topic, n, func(i int) kafka.Message {
		key, value := record(i)
		return kafka.Message{Key: key, Value: value}
	})
}

// PublishMessages produces n records to topic, round robin over its
// partitions, record i as message(i) gives it (key, value, headers), and
// waits until the broker has acked every one (acks=all) or ctx ends. It
// produces through a transport of its own that it closes before it
// returns: the default one would keep connections and their goroutines
// after the call.
func (k *Kafka) PublishMessages(ctx context.Context, topic string, n int, message func(i int) kafka.Message) error {
	transport := &kafka.Transport{}
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:         kafka.TCP(k.Addrs()...),
		Topic:        topic,
		Balancer:     &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		BatchSize:    10_000,
		BatchBytes:   1 << 20,
		Transport:    transport,
	}
	// WriteMessages takes a chunk at a time, so a backlog of millions is
	// not all in memory at once.
	const chunk = 100_000
	msgs := make([]kafka.Message, 0, min(n, chunk))
	var err error
	for from := 0; from < n && err == nil; from += chunk {
		msgs = msgs[:0]
		for i := from; i < min(from+chunk, n); i++ {
			msgs = append(msgs, message(i))
		}
		err = w.WriteMessages(ctx, msgs...)
	}
	if err = errors.Join(err, w.Close()); err != nil {
		return fmt.Errorf("kafka: produce to %s: %w", topic, err)
	}
	return nil
}

// Close shuts the cluster down.
func (k *Kafka) Close() { k.c.Close() }
