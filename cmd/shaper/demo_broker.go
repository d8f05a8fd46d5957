//go:build !nodemo

// The embedded nats-server and kfake (internal/embedded) are imported here
// and nowhere else in the binary, so that -tags nodemo leaves both out of
// release builds.

package main

import (
	"context"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/embedded"
	"github.com/shaper-dev/shaper/sources"
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

// natsDemo is an embedded nats-server with a JetStream stream, DEMO.
type natsDemo struct {
	js *embedded.JetStream
}

func startNATSDemo(ctx context.Context) (*natsDemo, error) {
	js, err := embedded.StartJetStream(embedded.JetStreamOptions{})
	if err != nil {
		return nil, err
	}
	if err := js.CreateStream(ctx, "DEMO", "demo.>"); err != nil {
		js.Close()
		return nil, err
	}
	return &natsDemo{js: js}, nil
}

func (d *natsDemo) String() string { return "embedded NATS JetStream" }

func (d *natsDemo) source() config.Source {
	return config.Source{NATS: &sources.NATSConfig{URL: d.js.URL(), Subject: demoTopic, Stream: "DEMO"}}
}

func (d *natsDemo) publish(ctx context.Context, bodies [][]byte) error {
	return d.js.Publish(ctx, demoTopic, len(bodies), func(i int) []byte { return bodies[i] })
}

func (d *natsDemo) close() { d.js.Close() }

// kafkaDemo is an in-process Kafka (kfake) with a four-partition topic.
type kafkaDemo struct {
	k *embedded.Kafka
}

func startKafkaDemo() (*kafkaDemo, error) {
	k, err := embedded.StartKafka(4, demoTopic)
	if err != nil {
		return nil, err
	}
	return &kafkaDemo{k: k}, nil
}

func (d *kafkaDemo) String() string { return "in-process Kafka (kfake)" }

func (d *kafkaDemo) source() config.Source {
	return config.Source{Kafka: sources.InProcessKafka(d.k.Addrs(), demoTopic, "shaper-demo")}
}

func (d *kafkaDemo) publish(ctx context.Context, bodies [][]byte) error {
	return d.k.Publish(ctx, demoTopic, len(bodies), func(i int) ([]byte, []byte) { return nil, bodies[i] })
}

func (d *kafkaDemo) close() { d.k.Close() }
