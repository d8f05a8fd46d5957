// Command broker is a broker of the bench's peers section in a process of
// its own, so that its CPU is measured apart from its clients', holding a
// backlog of peer.Body messages stored before it says it is ready:
//
//   - -kind nats: an embedded nats-server with JetStream (internal/embedded)
//     on 127.0.0.1 and a free port, with one file-backed stream -stream on
//     -subject. Core NATS subjects outside the stream work as on any server.
//   - -kind kafka: kfake, franz-go's Kafka protocol server, one broker on
//     127.0.0.1 and a free port, with one topic -topic of -partitions
//     partitions, the backlog produced round robin over them. There is no
//     real Kafka on this machine; kfake speaks the protocol, but what it
//     costs per message is its own.
//
// It prints one line on stdout, the NATS client URL or the Kafka broker's
// host:port, once the backlog is stored, writes nothing else there, and
// runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/shaper-dev/shaper/bench/peers/peer"
	"github.com/shaper-dev/shaper/internal/embedded"
)

func main() { peer.Main("broker", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	kind := fs.String("kind", "", "nats or kafka (required)")
	stream := fs.String("stream", "", "nats: the stream to create")
	subject := fs.String("subject", "", "nats: the subject the stream captures and the backlog is published to")
	topic := fs.String("topic", "", "kafka: the topic to create")
	partitions := fs.Int("partitions", 4, "kafka: the topic's partitions")
	n := fs.Int("backlog", 0, "how many messages to store before the broker says it is ready")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *n < 0:
		return errors.New("-backlog must be >= 0")
	case *kind == "nats" && *stream != "" && *subject != "":
		// The limits of the bench harness's own server: room for the
		// largest backlogs, and more publishes awaiting their ack than the
		// client's default.
		js, err := embedded.StartJetStream(embedded.JetStreamOptions{MaxMemory: 1 << 30, MaxStore: 8 << 30, MaxPending: 4096})
		if err != nil {
			return err
		}
		defer js.Close()
		if err := js.CreateStream(ctx, *stream, *subject); err != nil {
			return err
		}
		if err := js.Publish(ctx, *subject, *n, peer.Body); err != nil {
			return err
		}
		fmt.Println(js.URL())
	case *kind == "kafka" && *topic != "" && *partitions >= 1:
		k, err := embedded.StartKafka(int32(*partitions), *topic)
		if err != nil {
			return err
		}
		defer k.Close()
		if err := k.Publish(ctx, *topic, *n, func(i int) ([]byte, []byte) { return []byte(strconv.Itoa(i)), peer.Body(i) }); err != nil {
			return err
		}
		fmt.Println(k.Addrs()[0])
	default:
		return errors.New("want -kind nats with -stream and -subject, or -kind kafka with -topic and -partitions >= 1")
	}
	<-ctx.Done()
	return nil
}
