package sinks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
)

// startKafka starts an in-process Kafka broker (kfake) holding "topic" with
// four partitions, plus whatever opts add.
func startKafka(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	return kafkatest.Start(t, append([]kfake.Opt{kfake.SeedTopics(4, "topic")}, opts...)...).Kfake()
}

func kafkaConfig(brokers []string, topic string) KafkaPublisherConfig {
	return KafkaPublisherConfig{
		Config: kafkaconn.Config{Brokers: brokers},
		Topic:  topic,
	}
}

func newKafka(t *testing.T, cfg KafkaPublisherConfig) *Kafka {
	t.Helper()
	k, err := NewKafka(cfg, "sinks-test")
	if err != nil {
		t.Fatalf("NewKafka: %v", err)
	}
	closeAtEnd(t, k)
	return k
}

// newClient returns a franz-go client of c for the test's own checks.
func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consume reads topic from the start until it has n records, and fails the
// test if they do not arrive within 30s.
func consume(t *testing.T, c *kfake.Cluster, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d records of %s in 30s; want %d", len(recs), topic, n)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		recs = append(recs, fetches.Records()...)
	}
	return recs
}

// endOffsets returns how many records each partition of topic holds.
func endOffsets(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range int32(4) {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // -1: the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	ends := make(map[int32]int64)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			ends[p.Partition] = p.Offset
		}
	}
	return ends
}

// topicExists asks the broker whether topic exists, without creating it.
func topicExists(t *testing.T, cl *kgo.Client, topic string) bool {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(testCtx(t), cl)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	return len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0
}

func sendOK(t *testing.T, k *Kafka, m *shaper.Message) {
	t.Helper()
	if code, err := sendCode(testCtx(t), k, m); code != "ok" || err != nil {
		t.Fatalf("Send = %q, %v; want \"ok\", nil", code, err)
	}
}

func TestKafkaSendWritesPayloadKeyAndEveryHeaderIntact(t *testing.T) {
	c := startKafka(t)
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))

	keyed := deadLetter("a\x00b\r\nc\xff")
	keyed.Key = []byte("order-42")
	bare := &shaper.Message{ID: "2", Payload: []byte("bare")}
	sendOK(t, k, keyed)
	sendOK(t, k, bare)

	recs := consume(t, c, "topic", 2)
	byValue := make(map[string]*kgo.Record)
	for _, r := range recs {
		byValue[string(r.Value)] = r
	}
	r := byValue[string(keyed.Payload)]
	if r == nil {
		t.Fatalf("no record with payload %q among %d", keyed.Payload, len(recs))
	}
	if !bytes.Equal(r.Key, keyed.Key) {
		t.Errorf("key = %q; want %q", r.Key, keyed.Key)
	}
	want := []kgo.RecordHeader{
		{Key: "Shaper-Attempts", Value: []byte("1")},
		{Key: "Shaper-Error", Value: []byte("status 400: bad signature")},
		{Key: "Shaper-Pipeline", Value: []byte("psp-callbacks")},
		{Key: "Shaper-Reason", Value: []byte("rejected")},
		{Key: "Shaper-Source", Value: []byte("psp.callbacks/0/7")},
		{Key: "X-Multi", Value: []byte("one")},
		{Key: "X-Multi", Value: []byte("two")},
	}
	if !reflect.DeepEqual(r.Headers, want) {
		t.Errorf("headers = %q; want %q", r.Headers, want)
	}

	r = byValue["bare"]
	if r == nil {
		t.Fatalf("no record with payload \"bare\" among %d", len(recs))
	}
	if r.Key != nil || len(r.Headers) != 0 {
		t.Errorf("record of a message without key or headers: key %q, headers %q; want a null key and none", r.Key, r.Headers)
	}
}

func TestKafkaSendMakesOneAttemptThatWaitsForEveryInSyncReplica(t *testing.T) {
	c := startKafka(t)
	var (
		failing  atomic.Bool
		produces atomic.Int64
		mu       sync.Mutex
		acks     []int16
	)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		produces.Add(1)
		mu.Lock()
		acks = append(acks, req.Acks)
		mu.Unlock()
		if !failing.Load() {
			return nil, nil, false // the broker handles it
		}
		// A leader change: retryable, and kafka-go would retry it itself.
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewProduceResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewProduceResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, kerr.NotLeaderForPartition.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))

	failing.Store(true)
	code, err := sendCode(testCtx(t), k, &shaper.Message{Payload: []byte("refused")})
	if code != "error" || err == nil || errors.Is(err, shaper.ErrMalformed) {
		t.Errorf("Send to a partition without leader = %q, %v; want \"error\" and a retryable error", code, err)
	}
	if n := produces.Load(); n != 1 {
		t.Errorf("Send made %d produce requests; want 1: retries belong to the core", n)
	}

	failing.Store(false)
	sendOK(t, k, &shaper.Message{Payload: []byte("accepted")})
	mu.Lock()
	defer mu.Unlock()
	for i, a := range acks {
		if a != -1 {
			t.Errorf("produce request %d asked for acks=%d; want -1 (all in-sync replicas)", i, a)
		}
	}
}

func TestKafkaSendPutsEachKeyOnOnePartitionInOrderLikeTheJavaClient(t *testing.T) {
	const keys, perKey = 20, 10
	c := startKafka(t, kfake.SeedTopics(4, "reference"))
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))
	for i := range perKey {
		for key := range keys {
			sendOK(t, k, &shaper.Message{Key: fmt.Appendf(nil, "key-%d", key), Payload: fmt.Appendf(nil, "%d", i)})
		}
	}

	// franz-go's default partitioner hashes keys with murmur2, as the Java
	// client does: records of one key from either land together.
	ref := newClient(t, c)
	for key := range keys {
		r := &kgo.Record{Topic: "reference", Key: fmt.Appendf(nil, "key-%d", key)}
		if err := ref.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatalf("reference produce: %v", err)
		}
	}
	want := make(map[string]int32)
	for _, r := range consume(t, c, "reference", keys) {
		want[string(r.Key)] = r.Partition
	}

	next := make(map[string]int) // the payload expected next, per key
	partitions := make(map[int32]bool)
	for _, r := range consume(t, c, "topic", keys*perKey) {
		key := string(r.Key)
		if r.Partition != want[key] {
			t.Errorf("%s (payload %s) on partition %d; want %d, as the Java client partitions it", key, r.Value, r.Partition, want[key])
		}
		if got := string(r.Value); got != strconv.Itoa(next[key]) {
			t.Errorf("%s: payload %s at offset %d; want %d: records of one key out of order", key, got, r.Offset, next[key])
		}
		next[key]++
		partitions[r.Partition] = true
	}
	if len(partitions) < 2 {
		t.Errorf("%d keys all on partitions %v; want them spread", keys, partitions)
	}
}

func TestKafkaConcurrentSendsAllArriveExactlyOnceBatched(t *testing.T) {
	const n = 200
	c := startKafka(t)
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))
	_ = k.batched.Stats() // reset the counters

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			m := &shaper.Message{Key: fmt.Appendf(nil, "k%d", i%7), Payload: fmt.Appendf(nil, "m%03d", i)}
			if code, err := sendCode(testCtx(t), k, m); code != "ok" || err != nil {
				errs <- fmt.Errorf("Send(m%03d) = %q, %v; want \"ok\", nil", i, code, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	seen := make(map[string]int)
	for _, r := range consume(t, c, "topic", n) {
		seen[string(r.Value)]++
	}
	for i := range n {
		if v := fmt.Sprintf("m%03d", i); seen[v] != 1 {
			t.Errorf("%s arrived %d times; want once", v, seen[v])
		}
	}
	var total int64
	for _, end := range endOffsets(t, newClient(t, c), "topic") {
		total += end
	}
	if total != n {
		t.Errorf("topic holds %d records; want %d", total, n)
	}
	if s := k.batched.Stats(); s.Writes >= s.Messages {
		t.Errorf("%d records took %d produce requests; want concurrent Sends batched together", s.Messages, s.Writes)
	}
}

func TestKafkaSendToUnknownTopicIsRetryableErrorWithoutCreatingIt(t *testing.T) {
	// The broker would create a topic on request; the sink must not ask.
	c := startKafka(t, kfake.AllowAutoTopicCreation())
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "missing"))
	admin := newClient(t, c)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, err := sendCode(ctx, k, &shaper.Message{Payload: []byte("x")})
	if code != "error" || err == nil || errors.Is(err, shaper.ErrMalformed) {
		t.Fatalf("Send to a missing topic = %q, %v; want \"error\" and a retryable error", code, err)
	}
	t.Logf("Send to a missing topic: %v", err)
	if !strings.Contains(err.Error(), "missing") {
		t.Errorf("error %q does not name the topic", err)
	}
	if topicExists(t, admin, "missing") {
		t.Errorf("topic \"missing\" exists after Send; want no auto-creation")
	}

	// An operator creates it: a retry gets through once the sink's
	// metadata, refreshed every few seconds, shows it.
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "missing", 2, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(testCtx(t), admin)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v, %+v", err, resp)
	}
	sendUntilOK(t, k, &shaper.Message{Payload: []byte("after create")}, "the topic was created")
	if recs := consume(t, c, "missing", 1); string(recs[0].Value) != "after create" {
		t.Errorf("record = %q; want \"after create\"", recs[0].Value)
	}
}

// blackhole accepts connections and never answers, like a broker that hangs
// or a firewall that lets the handshake through. The connections close when
// the test ends.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestKafkaSendWithBrokersUnreachableFailsWithinTheDeadline(t *testing.T) {
	tests := []struct {
		name   string
		broker func(t *testing.T) string
	}{
		{"connection refused", func(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(freeport.Get(t)) }},
		{"broker never answers", blackhole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broker := tt.broker(t)
			k := newKafka(t, kafkaConfig([]string{broker}, "topic"))

			const timeout = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			type result struct {
				code string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := sendCode(ctx, k, &shaper.Message{Payload: []byte("x")})
				done <- result{code, err}
			}()
			select {
			case r := <-done:
				if r.code != "error" || r.err == nil || errors.Is(r.err, shaper.ErrMalformed) {
					t.Errorf("Send = %q, %v; want \"error\" and a retryable error", r.code, r.err)
				}
				t.Logf("Send: %v", r.err)
			case <-time.After(timeout + 10*time.Second):
				t.Fatalf("Send still running 10s after its %s deadline", timeout)
			}
		})
	}
}

func TestKafkaStartsWhileBrokerDownAndSendsOnceItIsUp(t *testing.T) {
	broker := kafkatest.Start(t, kfake.SeedTopics(4, "topic"))
	broker.Stop()
	k := newKafka(t, kafkaConfig([]string{broker.Addr}, "topic"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if code, err := sendCode(ctx, k, &shaper.Message{Payload: []byte("while down")}); code != "error" || err == nil {
		t.Fatalf("Send with the broker down = %q, %v; want \"error\"", code, err)
	}

	broker.Restart()
	c := broker.Kfake()
	sendUntilOK(t, k, &shaper.Message{Payload: []byte("after start")}, "the broker started")
	if recs := consume(t, c, "topic", 1); string(recs[0].Value) != "after start" {
		t.Errorf("record = %q; want \"after start\"", recs[0].Value)
	}
}

func TestKafkaSASLAcceptsRightCredentialsAndNeverShowsAWrongPassword(t *testing.T) {
	const wrong = "hunter2-wrong"
	c := startKafka(t,
		kfake.EnableSASL(),
		kfake.Superuser(kafkaconn.SASLPlain, "plain-user", "plain-pw"),
		kfake.Superuser(kafkaconn.SASLScramSHA256, "scram256-user", "scram256-pw"),
		kfake.Superuser(kafkaconn.SASLScramSHA512, "scram512-user", "scram512-pw"),
	)
	tests := []struct {
		mechanism, user, password string
	}{
		{kafkaconn.SASLPlain, "plain-user", "plain-pw"},
		{kafkaconn.SASLScramSHA256, "scram256-user", "scram256-pw"},
		{kafkaconn.SASLScramSHA512, "scram512-user", "scram512-pw"},
	}
	for _, tt := range tests {
		t.Run(tt.mechanism, func(t *testing.T) {
			cfg := kafkaConfig(c.ListenAddrs(), "topic")
			cfg.SASL = &kafkaconn.SASLConfig{Mechanism: tt.mechanism, Username: tt.user, Password: tt.password}
			sendOK(t, newKafka(t, cfg), &shaper.Message{Payload: []byte(tt.mechanism)})

			cfg.SASL = &kafkaconn.SASLConfig{Mechanism: tt.mechanism, Username: tt.user, Password: wrong}
			code, err := sendCode(testCtx(t), newKafka(t, cfg), &shaper.Message{Payload: []byte("refused")})
			if code != "error" || err == nil {
				t.Fatalf("Send with a wrong password = %q, %v; want \"error\"", code, err)
			}
			t.Logf("Send with a wrong password: %v", err)
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
	seen := make(map[string]bool)
	for _, r := range consume(t, c, "topic", len(tests), kgo.SASL(scram.Auth{User: "scram256-user", Pass: "scram256-pw"}.AsSha256Mechanism())) {
		seen[string(r.Value)] = true
	}
	for _, tt := range tests {
		if !seen[tt.mechanism] {
			t.Errorf("no record written over %s", tt.mechanism)
		}
	}
	if seen["refused"] {
		t.Errorf("a record was written with a wrong password")
	}
}

func TestKafkaTLSWritesWithTrustedCAAndClientCertificate(t *testing.T) {
	pki := kafkaconntest.NewPKI(t, "127.0.0.1")
	c := startKafka(t, kfake.TLS(pki.ServerConfig(true)))

	cfg := kafkaConfig(c.ListenAddrs(), "topic")
	cfg.TLS = &tlsconf.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}
	sendOK(t, newKafka(t, cfg), &shaper.Message{Payload: []byte("over tls")})

	other := kafkaconntest.NewPKI(t, "127.0.0.1")
	tests := []struct {
		name string
		give tlsconf.Config
	}{
		{"server of an untrusted CA", tlsconf.Config{CAFile: other.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}},
		{"no client certificate", tlsconf.Config{CAFile: pki.CAFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := kafkaConfig(c.ListenAddrs(), "topic")
			cfg.TLS = &tt.give
			code, err := sendCode(testCtx(t), newKafka(t, cfg), &shaper.Message{Payload: []byte("refused")})
			if code != "error" || err == nil {
				t.Fatalf("Send = %q, %v; want \"error\"", code, err)
			}
			t.Logf("Send: %v", err)
		})
	}

	clientTLS, err := tlsconf.Client(cfg.TLS)
	if err != nil {
		t.Fatal(err)
	}
	if recs := consume(t, c, "topic", 1, kgo.DialTLSConfig(clientTLS)); string(recs[0].Value) != "over tls" {
		t.Errorf("record = %q; want \"over tls\"", recs[0].Value)
	}
}

func TestKafkaSendOfRecordTooLargeForTheBrokerIsMalformed(t *testing.T) {
	c := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))

	code, err := sendCode(testCtx(t), k, &shaper.Message{Key: []byte("k"), Payload: make([]byte, 4096)})
	if code != "error" || !errors.Is(err, shaper.ErrMalformed) {
		t.Fatalf("Send(4 KiB) to a broker taking 2 KiB = %q, %v; want \"error\", ErrMalformed", code, err)
	}
	t.Logf("Send(4 KiB): %v", err)
	sendOK(t, k, &shaper.Message{Key: []byte("k"), Payload: make([]byte, 1024)})
}

func TestKafkaSendOfRecordOver100MiBIsMalformedWithoutRequest(t *testing.T) {
	c := startKafka(t)
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))
	code, err := sendCode(testCtx(t), k, &shaper.Message{Payload: make([]byte, kafkaMaxRecordBytes+1)})
	if code != "" || !errors.Is(err, shaper.ErrMalformed) {
		t.Fatalf("Send(100 MiB + 1) = %q, %v; want \"\", ErrMalformed", code, err)
	}
	if ends := endOffsets(t, newClient(t, c), "topic"); ends[0]+ends[1]+ends[2]+ends[3] != 0 {
		t.Errorf("end offsets %v; want nothing written", ends)
	}
}

func TestKafkaBatchTooLargeForTheBrokerIsNotTakenAsMalformedRecords(t *testing.T) {
	// Each record fits the broker's limit; a batch of them does not.
	const n, size = 16, 600
	c := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	k := newKafka(t, kafkaConfig(c.ListenAddrs(), "topic"))

	sent := 0
	for round := 0; round < 20 && k.aloneWrites.Load() == 0; round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				// One key: one partition, so the records share batches.
				m := &shaper.Message{Key: []byte("same"), Payload: bytes.Repeat([]byte{byte('a' + i)}, size)}
				if code, err := sendCode(testCtx(t), k, m); code != "ok" || err != nil {
					t.Errorf("round %d: Send(%d bytes) = %q, %v; want \"ok\", nil", round, size, code, err)
				}
			})
		}
		close(start)
		wg.Wait()
		sent += n
	}
	if k.aloneWrites.Load() == 0 {
		t.Fatalf("no batch of %d concurrent Sends was refused in 20 rounds; the test did not exercise the split", n)
	}
	if got := len(consume(t, c, "topic", sent)); got != sent {
		t.Errorf("consumed %d records; want %d", got, sent)
	}
}

func TestKafkaSendAfterCloseFails(t *testing.T) {
	c := startKafka(t)
	k, err := NewKafka(kafkaConfig(c.ListenAddrs(), "topic"), "sinks-test")
	if err != nil {
		t.Fatal(err)
	}
	sendOK(t, k, &shaper.Message{Payload: []byte("before close")})
	if err := k.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if code, err := sendCode(testCtx(t), k, &shaper.Message{Payload: []byte("after close")}); code != "error" || err == nil {
		t.Errorf("Send after Close = %q, %v; want \"error\"", code, err)
	}
}

func TestNewKafkaRejectsBadConfigWithoutShowingThePassword(t *testing.T) {
	tests := []struct {
		name string
		give KafkaPublisherConfig
		want string
	}{
		{"no brokers", KafkaPublisherConfig{Topic: "t"}, "no brokers"},
		{"no topic", kafkaConfig([]string{"127.0.0.1:9092"}, ""), "no topic"},
		{"unknown SASL mechanism", KafkaPublisherConfig{
			Config: kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"},
				SASL: &kafkaconn.SASLConfig{Mechanism: "OAUTHBEARER", Username: "u", Password: "hunter2"}},
			Topic: "t",
		}, "OAUTHBEARER"},
		{"SCRAM password SASLprep refuses", KafkaPublisherConfig{
			Config: kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"},
				SASL: &kafkaconn.SASLConfig{Mechanism: kafkaconn.SASLScramSHA256, Username: "u", Password: "hunter2\a"}},
			Topic: "t",
		}, "password"},
		{"missing CA file", KafkaPublisherConfig{
			Config: kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"},
				TLS: &tlsconf.Config{CAFile: "/nonexistent/ca.pem"}},
			Topic: "t",
		}, "/nonexistent/ca.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := NewKafka(tt.give, "sinks-test")
			if err == nil {
				_ = k.Close(context.Background())
				t.Fatalf("NewKafka = nil error; want one saying %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("NewKafka = %v; want an error saying %q and not the password", err, tt.want)
			}
		})
	}
}
