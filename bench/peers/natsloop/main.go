// Command natsloop is the loop a user would write instead of shaper to
// deliver core NATS messages to an HTTP endpoint at a paced rate: a peer
// of shaper in the bench's peers section. It is whole in this file, as
// such a loop would be, so that what shaper is compared with can be read
// at once.
//
// A channel subscription (nats.go ChanSubscribe) fills a channel of
// -buffer messages, the same room as shaper's bucket in the bench; when
// it is full, the client drops what arrives, as shaper's core NATS source
// does: core NATS keeps nothing for a slow consumer. -workers goroutines
// take messages from the channel; each waits on one shared x/time/rate
// limiter (burst 1) and POSTs the body through net/http with a transport
// that keeps a connection per worker. Core NATS has no ack: a failed
// request is logged and the message is gone.
//
// It runs until SIGTERM or SIGINT, and then writes how many messages the
// client dropped to stderr.
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
	"golang.org/x/time/rate"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsloop:", err)
		os.Exit(1)
	}
}

// loop is what every worker shares.
type loop struct {
	client  *http.Client
	limiter *rate.Limiter
	url     string
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("natsloop", flag.ContinueOnError)
	server := fs.String("nats", "", "NATS server URL (required)")
	subject := fs.String("subject", "", "subject to subscribe to (required)")
	sink := fs.String("sink", "", "URL to POST each message's body to (required)")
	limit := fs.Float64("rate", 0, "requests per second (required)")
	workers := fs.Int("workers", 8, "requests in flight at once")
	buffer := fs.Int("buffer", 1000, "messages held before the client drops what arrives")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *server == "" || *subject == "" || *sink == "" || *limit <= 0 || *workers < 1 || *buffer < 1 {
		return errors.New("-nats, -subject, -sink and -rate > 0 are required, and -workers and -buffer must be >= 1")
	}
	// The client reports a full channel (a slow consumer) through its
	// error handler; the drops are counted by the subscription instead.
	nc, err := nats.Connect(*server, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		return err
	}
	defer nc.Close()
	l := &loop{
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			MaxIdleConns: *workers, MaxIdleConnsPerHost: *workers, IdleConnTimeout: 90 * time.Second,
		}},
		limiter: rate.NewLimiter(rate.Limit(*limit), 1),
		url:     *sink,
	}
	msgs := make(chan *nats.Msg, *buffer) // the subscription's room: full, the client drops
	sub, err := nc.ChanSubscribe(*subject, msgs)
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
	<-ctx.Done()
	dropped, derr := sub.Dropped()
	err = sub.Unsubscribe()
	wg.Wait()
	if derr == nil {
		log.Printf("the client dropped %d messages while the channel was full", dropped)
	}
	return err
}

// deliver waits for the message's turn and sends it.
func (l *loop) deliver(ctx context.Context, m *nats.Msg) {
	if err := l.limiter.Wait(ctx); err != nil {
		return // stopping
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(m.Data))
	if err != nil {
		log.Printf("request: %v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		log.Printf("post: %v", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Printf("post: %s", resp.Status)
	}
}
