package sinks_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
)

// target is one Sink implementation on its real server, for the contract
// suite: how to make the sink, read what reached the server, and take the
// server down.
type target struct {
	name string
	// start runs the server and returns the sink, what the server has
	// received so far, and a func that takes the server down.
	start func(t *testing.T) (sink shaper.Sink, received func() [][]byte, down func())
	// tooLarge is a payload the target can never take.
	tooLarge int
}

func targets() []target {
	return []target{
		{name: "http", tooLarge: 2 << 10, start: func(t *testing.T) (shaper.Sink, func() [][]byte, func()) {
			var mu sync.Mutex
			var got [][]byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, b)
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			cfg := sinks.HTTPConfig{URL: srv.URL, Method: "POST", MaxBodyBytes: 1 << 10,
				DeliveryConfig: shaper.DeliveryConfig{Timeout: time.Second, MaxInFlight: 4}}
			h, err := sinks.NewHTTP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return h, func() [][]byte { mu.Lock(); defer mu.Unlock(); return append([][]byte(nil), got...) }, srv.Close
		}},
		{name: "nats", tooLarge: 2 << 20, start: func(t *testing.T) (shaper.Sink, func() [][]byte, func()) {
			s := natstest.Start(t)
			nc, err := nats.Connect(s.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			sub, err := nc.SubscribeSync("contract.out")
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			received := func() [][]byte {
				for {
					m, err := sub.NextMsg(50 * time.Millisecond)
					if err != nil {
						return got
					}
					got = append(got, m.Data)
				}
			}
			n, err := sinks.NewNATS(sinks.NATSPublisherConfig{URL: s.ClientURL(), Subject: "contract.out"}, "contract")
			if err != nil {
				t.Fatal(err)
			}
			return n, received, func() { s.Shutdown(); s.WaitForShutdown() }
		}},
		{name: "kafka", tooLarge: 2 << 20, start: func(t *testing.T) (shaper.Sink, func() [][]byte, func()) {
			k := kafkatest.Start(t, kfake.SeedTopics(1, "contract.out"))
			c := k.Client(kgo.ConsumeTopics("contract.out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			t.Cleanup(c.Close)
			var got [][]byte
			received := func() [][]byte {
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				c.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r.Value) })
				return got
			}
			p, err := sinks.NewKafka(sinks.KafkaPublisherConfig{Config: kafkaconn.Config{Brokers: []string{k.Addr}}, Topic: "contract.out"}, "contract")
			if err != nil {
				t.Fatal(err)
			}
			return p, received, k.Stop
		}},
	}
}

// The one contract every Sink passes (HTTP, NATS, Kafka), on its real
// server: what the pipeline relies on when it sends, retries and
// dead-letters.
func TestEverySinkKeepsTheSinkContract(t *testing.T) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			t.Run("each successful Send delivers the payload once, byte for byte", func(t *testing.T) {
				sink, received, _ := tg.start(t)
				defer sink.Close(context.Background())
				payloads := [][]byte{[]byte(`{"payment":1}`), {0xff, 0xfe, 0x00, 'x'}, []byte("third")}
				for i, p := range payloads {
					if _, err := send(sink, &shaper.Message{ID: "c/" + string(rune('a'+i)), Payload: p}, 5*time.Second); err != nil {
						t.Fatalf("Send #%d = %v; want nil", i, err)
					}
				}
				var got [][]byte
				for deadline := time.Now().Add(5 * time.Second); len(got) < len(payloads) && time.Now().Before(deadline); {
					got = received()
				}
				if len(got) != len(payloads) {
					t.Fatalf("the server got %d messages; want %d", len(got), len(payloads))
				}
				for i := range payloads {
					if !bytes.Equal(got[i], payloads[i]) {
						t.Errorf("message %d = %q; want %q", i, got[i], payloads[i])
					}
				}
			})
			t.Run("a message the target can never take is ErrMalformed and not delivered", func(t *testing.T) {
				sink, received, _ := tg.start(t)
				defer sink.Close(context.Background())
				_, err := send(sink, &shaper.Message{ID: "c/big", Payload: bytes.Repeat([]byte("x"), tg.tooLarge)}, 10*time.Second)
				if !errors.Is(err, shaper.ErrMalformed) {
					t.Errorf("Send(%d bytes) = %v; want an error wrapping ErrMalformed", tg.tooLarge, err)
				}
				if got := received(); len(got) != 0 {
					t.Errorf("the server got %d messages; want none", len(got))
				}
			})
			t.Run("with the server down Send fails, retryably, within its deadline", func(t *testing.T) {
				sink, _, down := tg.start(t)
				defer sink.Close(context.Background())
				down()
				took, err := send(sink, &shaper.Message{ID: "c/down", Payload: []byte("x")}, time.Second)
				if err == nil || errors.Is(err, shaper.ErrMalformed) {
					t.Errorf("Send with the server down = %v; want an error that is not ErrMalformed (a retry may succeed)", err)
				}
				if took > 3*time.Second {
					t.Errorf("Send with the server down took %v; want it to end near its 1s deadline", took)
				}
			})
			t.Run("a Send whose context has ended fails at once", func(t *testing.T) {
				sink, _, _ := tg.start(t)
				defer sink.Close(context.Background())
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				start := time.Now()
				if err := sink.Send(ctx, &shaper.Message{ID: "c/late", Payload: []byte("x")}); err == nil {
					t.Error("Send(cancelled ctx) = nil; want an error")
				}
				if took := time.Since(start); took > time.Second {
					t.Errorf("Send(cancelled ctx) took %v; want it to return at once", took)
				}
			})
		})
	}
}

// send is one Send under a deadline, and how long it took.
func send(sink shaper.Sink, m *shaper.Message, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := sink.Send(ctx, m)
	return time.Since(start), err
}
