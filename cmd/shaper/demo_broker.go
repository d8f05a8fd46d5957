//go:build !nodemo

// The embedded nats-server and kfake are imported here and nowhere else in
// the binary, so that -tags nodemo leaves both out of release builds.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/sources"
	"github.com/twmb/franz-go/pkg/kfake"
)

// demoBroker is the demo's embedded broker: it tells the pipeline how to
// consume from it and publishes the burst.
type demoBroker interface {
	source() config.Source
	publish(ctx context.Context, bodies [][]byte) error
	close()
	String() string
}

const demoTopic = "demo.callbacks"

// natsDemo is an embedded nats-server with a JetStream stream.
type natsDemo struct {
	dir string
	ns  *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startNATSDemo(ctx context.Context) (_ *natsDemo, err error) {
	d := &natsDemo{}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.dir, err = os.MkdirTemp("", "shaper-demo-"); err != nil {
		return nil, err
	}
	d.ns, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: d.dir, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go d.ns.Start()
	if !d.ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("embedded nats server did not start")
	}
	if d.nc, err = nats.Connect(d.ns.ClientURL()); err != nil {
		return nil, err
	}
	if d.js, err = jetstream.New(d.nc); err != nil {
		return nil, err
	}
	if _, err = d.js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEMO", Subjects: []string{"demo.>"}}); err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	return d, nil
}

func (d *natsDemo) String() string { return "embedded NATS JetStream" }

func (d *natsDemo) source() config.Source {
	return config.Source{NATS: &sources.NATSConfig{URL: d.ns.ClientURL(), Subject: demoTopic, Stream: "DEMO"}}
}

func (d *natsDemo) publish(ctx context.Context, bodies [][]byte) error {
	for _, b := range bodies {
		if _, err := d.js.PublishAsync(demoTopic, b); err != nil {
			return err
		}
	}
	select {
	case <-d.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *natsDemo) close() {
	if d.nc != nil {
		d.nc.Close()
	}
	if d.ns != nil {
		d.ns.Shutdown()
		d.ns.WaitForShutdown()
	}
	if d.dir != "" {
		os.RemoveAll(d.dir)
	}
}

// kafkaDemo is an in-process Kafka (kfake) with a four-partition topic.
type kafkaDemo struct {
	cluster *kfake.Cluster
}

func startKafkaDemo() (*kafkaDemo, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, demoTopic))
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	return &kafkaDemo{cluster: c}, nil
}

func (d *kafkaDemo) String() string { return "in-process Kafka (kfake)" }

// source uses short group timings: kfake runs in this process, so the group
// forms in about a second instead of the production defaults' tens.
func (d *kafkaDemo) source() config.Source {
	return config.Source{Kafka: &sources.KafkaConfig{
		Config:            kafkaconn.Config{Brokers: d.cluster.ListenAddrs()},
		Topic:             demoTopic,
		Group:             "shaper-demo",
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		MaxWait:           200 * time.Millisecond,
	}}
}

func (d *kafkaDemo) publish(ctx context.Context, bodies [][]byte) error {
	transport := &kafka.Transport{} // its own, closed below: the default one keeps goroutines
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:         kafka.TCP(d.cluster.ListenAddrs()...),
		Topic:        demoTopic,
		Balancer:     &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		Transport:    transport,
	}
	msgs := make([]kafka.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = kafka.Message{Value: b}
	}
	return errors.Join(w.WriteMessages(ctx, msgs...), w.Close())
}

func (d *kafkaDemo) close() { d.cluster.Close() }
