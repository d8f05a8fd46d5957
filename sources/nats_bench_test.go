package sources

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/shaper"
)

// BenchmarkJetStreamFetch measures Fetch alone on a backlog, per size of the
// bucket's room (max); messages are acked outside the timer.
func BenchmarkJetStreamFetch(b *testing.B) {
	for _, max := range []int{1, 10, 100, 1000} {
		b.Run("max="+strconv.Itoa(max), func(b *testing.B) {
			s := natstest.Start(b)
			src, err := NewJetStream(jsConfig(s.ClientURL(), 30*time.Second), b.N+max, "shaper-bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close(context.Background())
			_, js := client(b, s)
			ctx := context.Background()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: testStream, Subjects: []string{"callbacks.>"}}); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				if _, err := js.PublishAsync(testSubject, []byte("payload")); err != nil {
					b.Fatal(err)
				}
			}
			<-js.PublishAsyncComplete()
			held := make([]*shaper.Message, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for len(held) < b.N {
				msgs, err := src.Fetch(ctx, min(max, b.N-len(held)))
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, msgs...)
			}
			b.StopTimer()
			for _, m := range held {
				if err := m.Receipt.Ack(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
