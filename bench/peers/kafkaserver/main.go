// Command kafkaserver is the Kafka broker of the bench's peers section in
// a process of its own, so that its CPU is measured apart from its
// clients': kfake, franz-go's Kafka protocol server (internal/embedded),
// one broker on 127.0.0.1 and a free port, with one topic of four
// partitions holding a backlog of backlog.Body messages, produced before
// the broker says it is ready. There is no real Kafka on this machine;
// kfake speaks the protocol, but what it costs per message is its own.
//
// It prints one line on stdout, the broker's host:port, once the backlog is
// stored, writes nothing else there, and runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/shaper-dev/shaper/bench/peers/backlog"
	"github.com/shaper-dev/shaper/internal/embedded"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkaserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kafkaserver", flag.ContinueOnError)
	topic := fs.String("topic", "", "name of the topic to create (required)")
	partitions := fs.Int("partitions", 4, "the topic's partitions")
	n := fs.Int("backlog", 0, "how many records to produce, round robin over the partitions, before the broker says it is ready")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *topic == "" || *partitions < 1 || *n < 0 {
		return errors.New("-topic is required, -partitions must be >= 1 and -backlog >= 0")
	}
	k, err := embedded.StartKafka(int32(*partitions), *topic)
	if err != nil {
		return err
	}
	defer k.Close()
	err = k.Publish(ctx, *topic, *n, func(i int) ([]byte, []byte) { return []byte(strconv.Itoa(i)), backlog.Body(i) })
	if err != nil {
		return err
	}
	fmt.Println(k.Addrs()[0])
	<-ctx.Done()
	return nil
}
