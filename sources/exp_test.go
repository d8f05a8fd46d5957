package sources

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/shaper-dev/shaper/internal/natstest"
)

func expSetup(t *testing.T, map_ int) (*nats.Conn, jetstream.JetStream, jetstream.Consumer) {
	s := natstest.Start(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "d", FilterSubject: "s.>", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: map_, MaxDeliver: -1})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, c
}

func drain(b jetstream.MessageBatch) ([]jetstream.Msg, error) {
	var out []jetstream.Msg
	for m := range b.Messages() {
		out = append(out, m)
	}
	return out, b.Error()
}

func TestExpMaxAckPending(t *testing.T) {
	_, js, c := expSetup(t, 5)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		js.Publish(ctx, "s.x", []byte("x"))
	}
	b, _ := c.FetchNoWait(10)
	msgs, err := drain(b)
	t.Logf("nowait(10): %d msgs err=%v", len(msgs), err)
	start := time.Now()
	b, _ = c.FetchNoWait(3)
	m2, err := drain(b)
	t.Logf("nowait(3) at MAP: %d msgs err=%v in %v", len(m2), err, time.Since(start))
	start = time.Now()
	b, _ = c.Fetch(1, jetstream.FetchMaxWait(1500*time.Millisecond))
	m2, err = drain(b)
	t.Logf("fetch(1,1.5s) at MAP: %d msgs err=%v in %v", len(m2), err, time.Since(start))
	// ack one after 300ms while waiting
	go func() { time.Sleep(300 * time.Millisecond); msgs[0].Ack() }()
	start = time.Now()
	b, _ = c.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
	m2, err = drain(b)
	t.Logf("fetch(1,3s) at MAP, ack after 300ms: %d msgs err=%v in %v", len(m2), err, time.Since(start))
	// nak with delay one: counts toward MAP?
	msgs[1].NakWithDelay(2 * time.Second)
	start = time.Now()
	b, _ = c.FetchNoWait(3)
	m2, err = drain(b)
	t.Logf("nowait(3) after NakWithDelay: %d msgs err=%v in %v", len(m2), err, time.Since(start))
}

func TestExpIdleLatency(t *testing.T) {
	_, js, c := expSetup(t, 100)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		b, _ := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		var pub time.Time
		go func() { time.Sleep(200 * time.Millisecond); pub = time.Now(); js.Publish(ctx, "s.x", []byte("x")) }()
		m := <-b.Messages()
		t.Logf("idle latency publish->msg: %v", time.Since(pub))
		m.Ack()
		drain(b)
	}
}

func benchStrategy(t *testing.T, name string, n, max int, fetch func(c jetstream.Consumer, max int) []jetstream.Msg) {
	_, js, c := expSetup(t, 1000)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		js.PublishAsync(fmt.Sprintf("s.%d", i), []byte("hello"))
	}
	<-js.PublishAsyncComplete()
	start := time.Now()
	got, calls := 0, 0
	for got < n {
		msgs := fetch(c, max)
		calls++
		for _, m := range msgs {
			m.Ack()
		}
		got += len(msgs)
	}
	_ = ctx
	t.Logf("%s: %d msgs max=%d in %v, %d calls, %.1f/call", name, n, max, time.Since(start), calls, float64(got)/float64(calls))
}

func stratA(c jetstream.Consumer, max int) []jetstream.Msg {
	for {
		b, _ := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
		out, _ := drain(b)
		if len(out) == 0 {
			continue
		}
		if max > 1 {
			b, _ = c.FetchNoWait(max - 1)
			more, _ := drain(b)
			out = append(out, more...)
		}
		return out
	}
}

func stratC(c jetstream.Consumer, max int) []jetstream.Msg {
	b, _ := c.FetchNoWait(max)
	out, _ := drain(b)
	if len(out) > 0 {
		return out
	}
	return stratA(c, max)
}

func stratB(c jetstream.Consumer, max int) []jetstream.Msg {
	for {
		b, _ := c.Fetch(max, jetstream.FetchMaxWait(time.Second))
		out, _ := drain(b)
		if len(out) > 0 {
			return out
		}
	}
}

func TestExpBurst(t *testing.T) {
	for _, max := range []int{1, 10, 100, 1000} {
		benchStrategy(t, "A fetch1+nowait", 20000, max, stratA)
		benchStrategy(t, "C nowait first", 20000, max, stratC)
		benchStrategy(t, "B fetch(max) full", 20000, max, stratB)
	}
}
