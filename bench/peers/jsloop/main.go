// Command jsloop is the loop a user would write instead of shaper to
// deliver NATS JetStream messages to an HTTP endpoint at a paced rate: a
// peer of shaper in the bench's peers section. It is whole in this file,
// as such a loop would be, so that what shaper is compared with can be
// read at once.
//
// A durable pull consumer is read with Consume (nats.go jetstream, which
// keeps up to 500 messages pulled ahead in batches); its callback hands
// each message to one of -workers goroutines. Each worker waits on one
// shared x/time/rate limiter (burst 1), POSTs the body through net/http
// with a transport that keeps a connection per worker, and acks the
// message after a 2xx: with Ack, or with -double-ack with DoubleAck, which
// waits for the server to confirm the ack, as shaper's source does. Any
// other answer or a failed request nacks the message for redelivery now.
//
// It runs until SIGTERM or SIGINT; messages pulled but not acked then come
// back after the consumer's AckWait.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsloop:", err)
		os.Exit(1)
	}
}

// loop is what every worker shares.
type loop struct {
	client    *http.Client
	limiter   *rate.Limiter
	url       string
	doubleAck bool
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("jsloop", flag.ContinueOnError)
	server := fs.String("nats", "", "NATS server URL (required)")
	stream := fs.String("stream", "", "stream to consume (required)")
	consumer := fs.String("consumer", "", "durable consumer name, created if missing (required)")
	sink := fs.String("sink", "", "URL to POST each message's body to (required)")
	limit := fs.Float64("rate", 0, "requests per second (required)")
	workers := fs.Int("workers", 8, "requests in flight at once")
	doubleAck := fs.Bool("double-ack", false, "ack with DoubleAck, which waits for the server to confirm the ack")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *server == "" || *stream == "" || *consumer == "" || *sink == "" || *limit <= 0 || *workers < 1 {
		return errors.New("-nats, -stream, -consumer, -sink and -rate > 0 are required, and -workers must be >= 1")
	}
	nc, err := nats.Connect(*server)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, *stream, jetstream.ConsumerConfig{Durable: *consumer, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	l := &loop{
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			MaxIdleConns: *workers, MaxIdleConnsPerHost: *workers, IdleConnTimeout: 90 * time.Second,
		}},
		limiter:   rate.NewLimiter(rate.Limit(*limit), 1),
		url:       *sink,
		doubleAck: *doubleAck,
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
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-msgs:
					l.deliver(ctx, m)
				}
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-cc.Closed():
		err = errors.New("consume ended")
	}
	cc.Stop()
	cancel()
	wg.Wait()
	<-cc.Closed()
	return err
}

// deliver waits for the message's turn, sends it, and acks it after a 2xx
// or nacks it.
func (l *loop) deliver(ctx context.Context, m jetstream.Msg) {
	if err := l.limiter.Wait(ctx); err != nil {
		return // stopping: the server redelivers it after AckWait
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(m.Data()))
	if err != nil {
		log.Printf("request: %v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		log.Printf("post: %v", err)
		_ = m.Nak() // on its way back; a lost nak is an AckWait later
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Printf("post: %s", resp.Status)
		_ = m.Nak()
		return
	}
	if l.doubleAck {
		err = m.DoubleAck(ctx)
	} else {
		err = m.Ack()
	}
	if err != nil {
		log.Printf("ack: %v", err)
	}
}
