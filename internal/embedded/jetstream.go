package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AckWait is the longest Publish waits for the acks of its batch once every
// message is sent.
const AckWait = 2 * time.Minute

// JetStreamOptions are the server and client settings that differ between
// callers. The zero value leaves every one at its default.
type JetStreamOptions struct {
	// MaxMemory is the most memory, in bytes, that JetStream may use for
	// streams. Default 0: the server sizes it from the machine's memory.
	MaxMemory int64
	// MaxStore is the most disk, in bytes, that JetStream may use for
	// streams. Default 0: the server sizes it from the disk's free space.
	MaxStore int64
	// MaxPending is how many published messages may wait for their ack
	// before Publish blocks to let acks catch up. Default 0: the jetstream
	// client's own, 4000.
	MaxPending int
}

// JetStream is a nats-server with JetStream on 127.0.0.1 and a free port,
// in this process, quiet and deaf to signals, storing streams in a
// temporary directory; and a client connected to it. It is safe for
// concurrent use; Close ends it.
type JetStream struct {
	dir string
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// StartJetStream starts the server, waits up to ten seconds for it to take
// connections and connects to it.
func StartJetStream(o JetStreamOptions) (_ *JetStream, err error) {
	j := &JetStream{}
	defer func() {
		if err != nil {
			j.Close()
		}
	}()
	if j.dir, err = os.MkdirTemp("", "shaper-embedded-nats-"); err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	j.srv, err = server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: j.dir, NoLog: true, NoSigs: true,
		JetStreamMaxMemory: o.MaxMemory, JetStreamMaxStore: o.MaxStore,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go j.srv.Start()
	if !j.srv.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("nats server: not ready for connections after 10s")
	}
	if j.nc, err = nats.Connect(j.srv.ClientURL()); err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	var jsOpts []jetstream.JetStreamOpt
	if o.MaxPending > 0 {
		jsOpts = append(jsOpts, jetstream.WithPublishAsyncMaxPending(o.MaxPending))
	}
	if j.js, err = jetstream.New(j.nc, jsOpts...); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return j, nil
}

// URL is the server's client URL, nats://127.0.0.1:port.
func (j *JetStream) URL() string { return j.srv.ClientURL() }

// CreateStream creates a file-backed stream named name that captures
// subjects.
func (j *JetStream) CreateStream(ctx context.Context, name string, subjects ...string) error {
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
		return fmt.Errorf("jetstream: create stream %s: %w", name, err)
	}
	return nil
}

// DeleteStream deletes the stream named name and the messages it holds.
func (j *JetStream) DeleteStream(ctx context.Context, name string) error {
	if err := j.js.DeleteStream(ctx, name); err != nil {
		return fmt.Errorf("jetstream: delete stream %s: %w", name, err)
	}
	return nil
}

// Publish publishes n messages to subject without waiting for each ack,
// message i with the body body(i) returns, called just before it is sent.
// It then waits until no publish of this client awaits its ack, for at most
// AckWait or until ctx ends. Publishes may run concurrently; each then waits
// for the others' acks too.
func (j *JetStream) Publish(ctx context.Context, subject string, n int, body func(i int) []byte) error {
	return j.PublishMsgs(ctx, subject, n, func(i int) *nats.Msg { return &nats.Msg{Subject: subject, Data: body(i)} })
}

// PublishMsgs is Publish with the whole message, headers included, that
// msg(i) returns; subject names the publishes in errors.
func (j *JetStream) PublishMsgs(ctx context.Context, subject string, n int, msg func(i int) *nats.Msg) error {
	for i := range n {
		if _, err := j.js.PublishMsgAsync(msg(i)); err != nil {
			return fmt.Errorf("jetstream: publish to %s: %w", subject, err)
		}
	}
	timeout := time.NewTimer(AckWait)
	defer timeout.Stop()
	select {
	case <-j.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout.C:
		return fmt.Errorf("jetstream: publish to %s: acks still pending after %v", subject, AckWait)
	}
}

// Close disconnects the client, shuts the server down, waits until it has
// and removes its store. It is safe on a JetStream that StartJetStream left
// half started.
func (j *JetStream) Close() {
	if j.nc != nil {
		j.nc.Close()
	}
	if j.srv != nil {
		j.srv.Shutdown()
		j.srv.WaitForShutdown()
	}
	if j.dir != "" {
		_ = os.RemoveAll(j.dir) // a temporary directory; the OS cleans up what is left
	}
}

// Unacked returns how many messages of stream the durable consumer has not
// acked: those not yet delivered, and those delivered and not acked (a
// nak among them, waiting for its redelivery).
func (j *JetStream) Unacked(ctx context.Context, stream, durable string) (int, error) {
	c, err := j.js.Consumer(ctx, stream, durable)
	if err != nil {
		return 0, fmt.Errorf("jetstream: consumer %s of %s: %w", durable, stream, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jetstream: consumer %s of %s: %w", durable, stream, err)
	}
	return int(info.NumPending) + info.NumAckPending, nil
}
