// Command natsserver is the NATS server of the bench's peers section in a
// process of its own, so that its CPU is measured apart from its clients':
// an embedded nats-server with JetStream (internal/embedded) on 127.0.0.1
// and a free port, with one file-backed stream holding a backlog of
// backlog.Body messages, published before the server says it is ready.
// Core NATS subjects outside the stream work as on any server.
//
// It prints one line on stdout, its client URL, once the backlog is
// stored, writes nothing else there, and runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/shaper-dev/shaper/bench/peers/backlog"
	"github.com/shaper-dev/shaper/internal/embedded"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("natsserver", flag.ContinueOnError)
	stream := fs.String("stream", "", "name of the stream to create (required)")
	subject := fs.String("subject", "", "the subject the stream captures and the backlog is published to (required)")
	n := fs.Int("backlog", 0, "how many messages to publish before the server says it is ready")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stream == "" || *subject == "" || *n < 0 {
		return errors.New("-stream and -subject are required, and -backlog must be >= 0")
	}
	// The limits of the bench harness's own server: room for the largest
	// backlogs, and more publishes awaiting their ack than the client's
	// default.
	js, err := embedded.StartJetStream(embedded.JetStreamOptions{MaxMemory: 1 << 30, MaxStore: 8 << 30, MaxPending: 4096})
	if err != nil {
		return err
	}
	defer js.Close()
	if err := js.CreateStream(ctx, *stream, *subject); err != nil {
		return err
	}
	if err := js.Publish(ctx, *subject, *n, backlog.Body); err != nil {
		return err
	}
	fmt.Println(js.URL())
	<-ctx.Done()
	return nil
}
