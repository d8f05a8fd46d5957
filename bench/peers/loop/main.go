// Command loop is the loop a user would write instead of shaper to deliver
// a broker's messages to an HTTP endpoint at a paced rate: the peer of
// shaper in the bench's peers section, one per source (-source). It is
// whole in this file, as such a loop would be, so that what shaper is
// compared with can be read at once: each source's part is what a user of
// that client would write, and the rest is the same for all three.
//
// -workers goroutines take the messages; each waits on one shared
// x/time/rate limiter (burst 1), POSTs the body through net/http with a
// transport that keeps a connection per worker, and settles the message
// by its answer:
//
//   - jetstream: a durable pull consumer read with Consume (nats.go
//     jetstream, which keeps up to 500 messages pulled ahead in batches).
//     A 2xx acks the message, with Ack or, with -double-ack, DoubleAck,
//     which waits for the server to confirm the ack, as shaper's source
//     does; any other answer or a failed request nacks it for redelivery
//     now. Messages pulled but not acked at the end come back after the
//     consumer's AckWait.
//   - kafka: a kafka-go consumer group Reader read with FetchMessage. A
//     2xx calls CommitMessages, which with CommitInterval 1s (shaper's
//     commit_interval default) queues the offset for the next periodic
//     commit. kafka-go commits the highest offset it was given per
//     partition, so with several workers a crash may skip a record still
//     in flight below it: this loop is as careful as the usual one, not as
//     careful as shaper, which commits only what is finished below. A
//     failed request is logged and not committed; the loop does not retry.
//     The group's timings make a group on kfake form in a second or two,
//     as the shaper child's do in the bench; it leaves the group at the end.
//   - nats: a channel subscription (nats.go ChanSubscribe) fills a channel
//     of -buffer messages, the same room as shaper's bucket in the bench;
//     when it is full the client drops what arrives, as shaper's core NATS
//     source does: core NATS keeps nothing for a slow consumer, and has no
//     ack. At the end it writes how many messages the client dropped.
//
// It runs until SIGTERM or SIGINT.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"golang.org/x/time/rate"

	"github.com/shaper-dev/shaper/bench/peers/peer"
)

func main() { peer.Main("loop", run) }

// loop is what every worker shares.
type loop struct {
	client  *http.Client
	limiter *rate.Limiter
	url     string
	workers int
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("loop", flag.ContinueOnError)
	source := fs.String("source", "", "jetstream, kafka or nats (required)")
	server := fs.String("nats", "", "NATS server URL (jetstream, nats)")
	stream := fs.String("stream", "", "stream to consume (jetstream)")
	consumer := fs.String("consumer", "", "durable consumer name, created if missing (jetstream)")
	doubleAck := fs.Bool("double-ack", false, "ack with DoubleAck, which waits for the server to confirm the ack (jetstream)")
	brokers := fs.String("brokers", "", "comma-separated host:port of the brokers (kafka)")
	topic := fs.String("topic", "", "topic to consume (kafka)")
	group := fs.String("group", "", "consumer group (kafka)")
	subject := fs.String("subject", "", "subject to subscribe to (nats)")
	buffer := fs.Int("buffer", 1000, "messages held before the client drops what arrives (nats)")
	sink := fs.String("sink", "", "URL to POST each message's body to (required)")
	limit := fs.Float64("rate", 0, "requests per second (required)")
	workers := fs.Int("workers", 8, "requests in flight at once")
	ca := fs.String("ca", "", "PEM file of the certificate to trust for an https -sink")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sink == "" || *limit <= 0 || *workers < 1 || *buffer < 1 {
		return errors.New("-sink and -rate > 0 are required, and -workers and -buffer must be >= 1")
	}
	transport := &http.Transport{MaxIdleConns: *workers, MaxIdleConnsPerHost: *workers, IdleConnTimeout: 90 * time.Second}
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-ca %s: no certificate", *ca)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	l := &loop{
		client:  &http.Client{Timeout: 2 * time.Second, Transport: transport},
		limiter: rate.NewLimiter(rate.Limit(*limit), 1),
		url:     *sink,
		workers: *workers,
	}
	switch *source {
	case "jetstream":
		return l.jetStream(ctx, *server, *stream, *consumer, *doubleAck)
	case "kafka":
		return l.kafka(ctx, *brokers, *topic, *group)
	case "nats":
		return l.nats(ctx, *server, *subject, *buffer)
	}
	return fmt.Errorf("-source %q: want jetstream, kafka or nats", *source)
}

// work starts the workers, each taking messages from in and handing them
// to deliver until ctx ends, and returns a function that waits for them.
func work[M any](ctx context.Context, l *loop, in <-chan M, deliver func(M)) (wait func()) {
	var wg sync.WaitGroup
	for range l.workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-in:
					deliver(m)
				}
			}
		})
	}
	return wg.Wait
}

// send waits for the message's turn, POSTs body, and reports whether the
// answer was a 2xx; false too when ctx ended first.
func (l *loop) send(ctx context.Context, body []byte) bool {
	if err := l.limiter.Wait(ctx); err != nil {
		return false // stopping: the broker gives it to the next reader
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		log.Printf("request: %v", err)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		log.Printf("post: %v", err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Printf("post: %s", resp.Status)
		return false
	}
	return true
}

// jetStream delivers the stream's messages through a durable consumer.
func (l *loop) jetStream(ctx context.Context, server, stream, consumer string, doubleAck bool) error {
	nc, err := nats.Connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Unbuffered: a message waits in Consume's buffer until a worker is free.
	msgs := make(chan jetstream.Msg)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { log.Printf("consume: %v", err) }))
	if err != nil {
		return err
	}
	wait := work(ctx, l, msgs, func(m jetstream.Msg) {
		var err error
		switch {
		case !l.send(ctx, m.Data()):
			if ctx.Err() == nil {
				_ = m.Nak() // on its way back; a lost nak is an AckWait later
			}
			return
		case doubleAck:
			err = m.DoubleAck(ctx)
		default:
			err = m.Ack()
		}
		if err != nil {
			log.Printf("ack: %v", err)
		}
	})
	select {
	case <-ctx.Done():
	case <-cc.Closed():
		err = errors.New("consume ended")
	}
	cc.Stop()
	cancel()
	wait()
	<-cc.Closed()
	return err
}

// kafka delivers the topic's records through a consumer group.
func (l *loop) kafka(ctx context.Context, brokers, topic, group string) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           strings.Split(brokers, ","),
		Topic:             topic,
		GroupID:           group,
		StartOffset:       kafka.FirstOffset,
		CommitInterval:    time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  2 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
		ReadBackoffMin:    10 * time.Millisecond,
		ReadBackoffMax:    100 * time.Millisecond,
		MaxWait:           200 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan kafka.Message) // unbuffered: the reader's queue is the buffer
	wait := work(ctx, l, msgs, func(m kafka.Message) {
		if !l.send(ctx, m.Value) {
			return // not committed, so the group's next member reads it again
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			log.Printf("commit partition %d offset %d: %v", m.Partition, m.Offset, err)
		}
	})
	var err error
	for err == nil {
		m, ferr := r.FetchMessage(ctx)
		if ferr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("fetch: %w", ferr)
			}
			break
		}
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}
	cancel()
	wait()
	return errors.Join(err, r.Close()) // Close commits what was queued and leaves the group
}

// nats delivers what the subject carries while the loop runs.
func (l *loop) nats(ctx context.Context, server, subject string, buffer int) error {
	// The client reports a full channel (a slow consumer) through its
	// error handler; the drops are counted by the subscription instead.
	nc, err := nats.Connect(server, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return err
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, buffer) // the subscription's room: full, the client drops
	sub, err := nc.ChanSubscribe(subject, msgs)
	if err != nil {
		return err
	}
	// No ack: a failed request's message is gone.
	wait := work(ctx, l, msgs, func(m *nats.Msg) { l.send(ctx, m.Data) })
	<-ctx.Done()
	dropped, derr := sub.Dropped()
	err = sub.Unsubscribe()
	wait()
	if derr == nil {
		log.Printf("the client dropped %d messages while the channel was full", dropped)
	}
	return err
}
