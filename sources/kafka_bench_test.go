package sources

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkKafkaFetch measures Fetch and Ack of a backlog spread over four
// partitions, per size of the bucket's room (max), against kfake.
func BenchmarkKafkaFetch(b *testing.B) {
	for _, max := range []int{1, 10, 100} {
		b.Run("max="+strconv.Itoa(max), func(b *testing.B) {
			c := startKfake(b)
			cl := kafkaClient(b, c, kgo.ProducerLinger(5*time.Millisecond))
			recs := make([]*kgo.Record, b.N+1) // one more to wait out the group join
			for i := range recs {
				recs[i] = &kgo.Record{Partition: int32(i % kafkaTestPartitions), Value: []byte("payload")}
			}
			produceRecords(b, cl, recs...)
			log, _ := testLogger(b)
			src, err := NewKafka(kafkaConfig(c.ListenAddrs(), "bench"), 1000, "shaper-bench", log)
			if err != nil {
				b.Fatal(err)
			}
			defer closeSource(b, src)
			ctx := context.Background()
			first, err := src.Fetch(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			if err := first[0].Receipt.Ack(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; {
				msgs, err := src.Fetch(ctx, min(max, b.N-n))
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range msgs {
					if err := m.Receipt.Ack(ctx); err != nil {
						b.Fatal(err)
					}
				}
				n += len(msgs)
			}
		})
	}
}
