// Command kafkaloop is the loop a user would write instead of shaper to
// deliver Kafka records to an HTTP endpoint at a paced rate: a peer of
// shaper in the bench's peers section. It is whole in this file, as such a
// loop would be, so that what shaper is compared with can be read at once.
//
// A kafka-go consumer group Reader is read with FetchMessage in one
// goroutine, which hands each record to one of -workers goroutines. Each
// worker waits on one shared x/time/rate limiter (burst 1), POSTs the
// value through net/http with a transport that keeps a connection per
// worker, and after a 2xx calls CommitMessages, which with CommitInterval
// 1s (shaper's commit_interval default) queues the offset for the next
// periodic commit. kafka-go commits the highest offset it was given per
// partition, so with several workers a crash may skip a record still in
// flight below it: this loop is as careful as the usual one, not as
// careful as shaper, which commits only what is finished below. A failed
// request is logged and not committed; the loop does not retry.
//
// The group's timings are the ones that make a group on kfake form in a
// second or two, the same as the shaper child's in the bench. It runs
// until SIGTERM or SIGINT, and leaves the group on the way out.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/time/rate"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkaloop:", err)
		os.Exit(1)
	}
}

// loop is what every worker shares.
type loop struct {
	reader  *kafka.Reader
	client  *http.Client
	limiter *rate.Limiter
	url     string
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kafkaloop", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "comma-separated host:port of the brokers (required)")
	topic := fs.String("topic", "", "topic to consume (required)")
	group := fs.String("group", "", "consumer group (required)")
	sink := fs.String("sink", "", "URL to POST each record's value to (required)")
	limit := fs.Float64("rate", 0, "requests per second (required)")
	workers := fs.Int("workers", 8, "requests in flight at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *topic == "" || *group == "" || *sink == "" || *limit <= 0 || *workers < 1 {
		return errors.New("-brokers, -topic, -group, -sink and -rate > 0 are required, and -workers must be >= 1")
	}
	l := &loop{
		reader: kafka.NewReader(kafka.ReaderConfig{
			Brokers:           strings.Split(*brokers, ","),
			Topic:             *topic,
			GroupID:           *group,
			StartOffset:       kafka.FirstOffset,
			CommitInterval:    time.Second,
			HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout:    6 * time.Second,
			RebalanceTimeout:  2 * time.Second,
			JoinGroupBackoff:  100 * time.Millisecond,
			ReadBackoffMin:    10 * time.Millisecond,
			ReadBackoffMax:    100 * time.Millisecond,
			MaxWait:           200 * time.Millisecond,
		}),
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			MaxIdleConns: *workers, MaxIdleConnsPerHost: *workers, IdleConnTimeout: 90 * time.Second,
		}},
		limiter: rate.NewLimiter(rate.Limit(*limit), 1),
		url:     *sink,
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan kafka.Message) // unbuffered: the reader's queue is the buffer
	var wg sync.WaitGroup
	for range *workers {
		wg.Go(func() {
			for m := range msgs {
				l.deliver(ctx, m)
			}
		})
	}
	var err error
	for {
		m, ferr := l.reader.FetchMessage(ctx)
		if ferr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("fetch: %w", ferr)
			}
			break
		}
		msgs <- m
	}
	close(msgs)
	cancel()
	wg.Wait()
	return errors.Join(err, l.reader.Close()) // Close commits what was queued and leaves the group
}

// deliver waits for the record's turn, sends it, and commits it after a
// 2xx.
func (l *loop) deliver(ctx context.Context, m kafka.Message) {
	if err := l.limiter.Wait(ctx); err != nil {
		return // stopping: not committed, so the group's next member reads it again
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(m.Value))
	if err != nil {
		log.Printf("request: %v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		log.Printf("post partition %d offset %d: %v", m.Partition, m.Offset, err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body) // read to the end, so the connection is reused
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		log.Printf("post partition %d offset %d: %s", m.Partition, m.Offset, resp.Status)
		return
	}
	if err := l.reader.CommitMessages(ctx, m); err != nil {
		log.Printf("commit partition %d offset %d: %v", m.Partition, m.Offset, err)
	}
}
