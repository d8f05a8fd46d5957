package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

const (
	kafkaTestTopic      = "topic"
	kafkaTestPartitions = 4
)

// startKfake starts an in-process Kafka with one broker and the test topic in
// four partitions, closed when the test ends.
func startKfake(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(kafkaTestPartitions, kafkaTestTopic)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// startKafkaGroup starts kfake (startKfake) and the test's own client on it,
// and returns them with the config of a source in group "g" there.
func startKafkaGroup(t *testing.T) (*kfake.Cluster, *kgo.Client, KafkaConfig) {
	t.Helper()
	c := startKfake(t)
	return c, kafkaClient(t, c), kafkaConfig(c.ListenAddrs(), "g")
}

// kafkaMember starts a cluster, produces each messages to every one of
// partitions (offsets 0 to each-1), and starts one member of group g, a
// source of capacity. It returns the test's client, the member's config (for
// more members) and the member.
func kafkaMember(t *testing.T, each, capacity int, partitions ...int32) (*kgo.Client, KafkaConfig, *Kafka) {
	t.Helper()
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, each, partitions...)
	src, _ := newKafkaSource(t, cfg, capacity)
	return cl, cfg, src
}

// kafkaConfig is a source config for the test topic with the group timings
// that make kfake group tests take a second or two (TOOLCHAIN.md).
func kafkaConfig(brokers []string, group string) KafkaConfig {
	return KafkaConfig{
		Config:            kafkaconn.Config{Brokers: brokers},
		Topic:             kafkaTestTopic,
		Group:             group,
		Start:             StartEarliest,
		CommitInterval:    100 * time.Millisecond,
		SessionTimeout:    6 * time.Second, // kfake's minimum
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		MaxWait:           200 * time.Millisecond,
	}
}

// testLogger returns a logger whose lines the test can count in a
// logtest.Buffer. With SHAPER_TEST_LOG set it also writes them to the test
// log, at debug level with SHAPER_TEST_LOG=debug.
func testLogger(t testing.TB) (*slog.Logger, *logtest.Buffer) {
	lb := new(logtest.Buffer)
	var w io.Writer = lb
	level := slog.LevelInfo
	if v := os.Getenv("SHAPER_TEST_LOG"); v != "" {
		w = io.MultiWriter(lb, testLog{t})
		if v == "debug" {
			level = slog.LevelDebug
		}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), lb
}

// testLog writes each log line to the test log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newKafkaSource starts a source and closes it when the test ends (a no-op
// if the test closed it already).
func newKafkaSource(t *testing.T, cfg KafkaConfig, capacity int) (*Kafka, *logtest.Buffer) {
	t.Helper()
	log, lb := testLogger(t)
	src, err := NewKafka(cfg, capacity, "shaper-test", log)
	if err != nil {
		t.Fatalf("NewKafka: %v", err)
	}
	t.Cleanup(func() { closeSource(t, src) })
	return src, lb
}

// kafkaClient is the test's own franz-go client: it produces to exact
// partitions and reads committed offsets independently of kafka-go.
func kafkaClient(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DefaultProduceTopic(kafkaTestTopic),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes n records "p<partition>-<i>" to each listed partition, i
// counting from first, and waits for the broker's acks.
func produce(t testing.TB, cl *kgo.Client, first, n int, partitions ...int32) {
	t.Helper()
	var recs []*kgo.Record
	for _, p := range partitions {
		for i := first; i < first+n; i++ {
			recs = append(recs, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	produceRecords(t, cl, recs...)
}

func produceRecords(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

var allPartitions = []int32{0, 1, 2, 3}

// everyPartition returns offset as the committed offset of every partition of
// the test topic (-1: none), as committed returns them.
func everyPartition(offset int64) map[int]int64 {
	out := make(map[int]int64, kafkaTestPartitions)
	for p := range kafkaTestPartitions {
		out[p] = offset
	}
	return out
}

// committed returns the group's committed offset per partition of the test
// topic (-1: none), read with the test's own client.
func committed(t testing.TB, cl *kgo.Client, group string) map[int]int64 {
	t.Helper()
	offsets, _ := committedWithMetadata(t, cl, group)
	return offsets
}

// committedWithMetadata returns the group's committed offset and its
// metadata per partition of the test topic (-1 and "": none).
func committedWithMetadata(t testing.TB, cl *kgo.Client, group string) (map[int]int64, map[int]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = kafkaTestTopic
	rt.Partitions = allPartitions
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	topics := resp.Topics
	if len(topics) == 0 && len(resp.Groups) == 1 {
		for _, gt := range resp.Groups[0].Topics {
			ot := kmsg.NewOffsetFetchResponseTopic()
			ot.Topic = gt.Topic
			for _, gp := range gt.Partitions {
				op := kmsg.NewOffsetFetchResponseTopicPartition()
				op.Partition, op.Offset, op.Metadata, op.ErrorCode = gp.Partition, gp.Offset, gp.Metadata, gp.ErrorCode
				ot.Partitions = append(ot.Partitions, op)
			}
			topics = append(topics, ot)
		}
	}
	out, md := make(map[int]int64), make(map[int]string)
	for _, tp := range topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode != 0 {
				t.Fatalf("offset fetch partition %d: error code %d", p.Partition, p.ErrorCode)
			}
			out[int(p.Partition)] = p.Offset
			if p.Metadata != nil {
				md[int(p.Partition)] = *p.Metadata
			}
		}
	}
	return out, md
}

// waitCommittedMetadata waits until the group's committed metadata of
// partition is want, and fails the test if it is not within 10s.
func waitCommittedMetadata(t *testing.T, cl *kgo.Client, group string, partition int, want string) {
	t.Helper()
	var got string
	if !testwait.Until(10*time.Second, func() bool {
		_, md := committedWithMetadata(t, cl, group)
		got = md[partition]
		return got == want
	}) {
		t.Fatalf("committed metadata of partition %d = %q; want %q", partition, got, want)
	}
}

// waitCommitted waits until the group's committed offsets equal want,
// and fails the test if they do not within 10s.
func waitCommitted(t *testing.T, cl *kgo.Client, group string, want map[int]int64) {
	t.Helper()
	var got map[int]int64
	if !testwait.Until(10*time.Second, func() bool {
		got = committed(t, cl, group)
		return maps.Equal(got, want)
	}) {
		t.Fatalf("committed offsets = %v; want %v", got, want)
	}
}

// partitionOffset splits a Kafka message id "topic/partition/offset", and
// reports a malformed one as a test error (safe from any goroutine).
func partitionOffset(t testing.TB, id string) (int, int64) {
	t.Helper()
	parts := strings.Split(id, "/")
	if len(parts) == 3 && parts[0] == kafkaTestTopic {
		p, err1 := strconv.Atoi(parts[1])
		o, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err1 == nil && err2 == nil {
			return p, o
		}
	}
	t.Errorf("message id %q: want %s/partition/offset", id, kafkaTestTopic)
	return -1, -1
}

// waitReady waits until src.Ready() returns nil, and fails the test if it
// does not within 15s.
func waitReady(t *testing.T, src *Kafka) {
	t.Helper()
	var err error
	if !testwait.Until(15*time.Second, func() bool { err = src.Ready(); return err == nil }) {
		t.Fatalf("Ready() = %v; want nil", err)
	}
}

// waitNotReady waits until src.Ready() returns an error containing want, and
// fails the test if it does not within 15s.
func waitNotReady(t *testing.T, src *Kafka, want string) error {
	t.Helper()
	var err error
	if !testwait.Until(15*time.Second, func() bool {
		err = src.Ready()
		return err != nil && strings.Contains(err.Error(), want)
	}) {
		t.Fatalf("Ready() = %v; want an error containing %q", err, want)
	}
	return err
}

func TestKafkaDeliversRecordsWithIDsKeysHeadersAndEmptyPayloadForNilValue(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	produceRecords(t, cl,
		&kgo.Record{Partition: 2, Key: []byte("k1"), Value: []byte("v1"), Headers: []kgo.RecordHeader{
			{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("3")},
		}},
		&kgo.Record{Partition: 2, Value: nil},
	)
	src, _ := newKafkaSource(t, cfg, 100)

	got := fetchN(t, src, 2, 10)
	m := got[0]
	if m.ID != "topic/2/0" || m.Origin != "topic/2/0" {
		t.Errorf("ID, Origin = %q, %q; want topic/2/0 for both", m.ID, m.Origin)
	}
	if string(m.Key) != "k1" || string(m.Payload) != "v1" {
		t.Errorf("Key, Payload = %q, %q; want k1, v1", m.Key, m.Payload)
	}
	wantHeader := map[string][]string{"a": {"1", "3"}, "b": {"2"}}
	if fmt.Sprint(m.Header) != fmt.Sprint(wantHeader) {
		t.Errorf("Header = %v; want %v", m.Header, wantHeader)
	}
	n := got[1]
	if n.ID != "topic/2/1" {
		t.Errorf("ID = %q; want topic/2/1", n.ID)
	}
	if n.Payload == nil || len(n.Payload) != 0 {
		t.Errorf("Payload of a nil value = %#v; want empty and non-nil", n.Payload)
	}
	if n.Key != nil || n.Header != nil {
		t.Errorf("Key, Header of a bare record = %q, %v; want nil, nil", n.Key, n.Header)
	}
	ack(t, got...)
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
}

// waitGroupStable waits until the group is stable with n members, and fails
// the test if it is not within 15s.
func waitGroupStable(t *testing.T, cl *kgo.Client, group string, n int) {
	t.Helper()
	var state string
	var members int
	if !testwait.UntilEach(15*time.Second, 5*time.Second, func(ctx context.Context) bool {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Groups) != 1 {
			return false
		}
		state, members = resp.Groups[0].State, len(resp.Groups[0].Members)
		return state == "Stable" && members == n
	}) {
		t.Fatalf("group %q: state %q with %d members; want Stable with %d", group, state, members, n)
	}
}

// marks returns the source's committable offset per partition it fetched
// from.
func marks(src *Kafka) map[int]int64 {
	src.session.mu.Lock()
	defer src.session.mu.Unlock()
	out := make(map[int]int64)
	for p := range kafkaTestPartitions {
		if m, ok := src.session.marks.markOf(p); ok {
			out[p] = m
		}
	}
	return out
}

func TestKafkaUnackedMessageHoldsItsPartitionsCommitWhileOthersAdvance(t *testing.T) {
	t.Parallel()
	cl, _, src := kafkaMember(t, 10, 100, allPartitions...)

	got := fetchN(t, src, 40, 7)
	var held *shaper.Message
	for _, m := range slices.Backward(got) { // newest first: out of order
		if m.ID == "topic/0/3" {
			held = m
			continue
		}
		ack(t, m)
	}
	if held == nil {
		t.Fatal("topic/0/3 not fetched")
	}
	waitCommitted(t, cl, "g", map[int]int64{0: 3, 1: 10, 2: 10, 3: 10})

	ack(t, held)
	waitCommitted(t, cl, "g", everyPartition(10))
}

func TestKafkaGracefulCloseCommitsEverythingSoTheGroupGetsNoDuplicate(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, 25, allPartitions...)
	drainOnly := cfg
	drainOnly.CommitInterval = time.Hour // only the drain commits
	a, _ := newKafkaSource(t, drainOnly, 1000)

	got := fetchN(t, a, 100, 30)
	perm := permutation(len(got), 7)
	for _, i := range perm {
		ack(t, got[i])
	}
	if c := committed(t, cl, "g"); !maps.Equal(c, everyPartition(-1)) {
		t.Fatalf("committed before Close = %v; want none (CommitInterval is an hour)", c)
	}
	closeSource(t, a)
	want := everyPartition(25)
	if c := committed(t, cl, "g"); !maps.Equal(c, want) || !maps.Equal(c, marks(a)) {
		t.Fatalf("committed after Close = %v; want %v, the source's contiguous marks %v", c, want, marks(a))
	}

	b, _ := newKafkaSource(t, cfg, 1000)
	produce(t, cl, 25, 1, 2) // one new message, to know b is consuming
	next := fetchN(t, b, 1, 100)
	if next[0].ID != "topic/2/25" {
		t.Fatalf("next member's first message = %s; want topic/2/25 (nothing before it again)", next[0].ID)
	}
	expectNothing(t, b, 500*time.Millisecond)
}

func TestKafkaCloseCommitsContiguousMarksAndOnlyNackedMessagesComeBackAfterRestart(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, 10, allPartitions...)
	a, lb := newKafkaSource(t, cfg, 100)

	for _, m := range fetchN(t, a, 40, 100) {
		switch m.ID {
		case "topic/1/4", "topic/3/0":
			if err := m.Receipt.Nack(context.Background(), time.Hour); err != nil {
				t.Fatalf("Nack(%s): %v", m.ID, err)
			}
		default:
			ack(t, m)
		}
	}
	closeSource(t, a)
	// Partition 3 never moved past its first offset, but the offsets
	// finished after it are committed with it, in the metadata.
	want := map[int]int64{0: 10, 1: 4, 2: 10, 3: 0}
	wantMeta := map[int]string{1: "s1:4:1+5", 3: "s1:0:1+9"}
	if m := marks(a); !maps.Equal(m, want) {
		t.Fatalf("contiguous marks = %v; want %v", m, want)
	}
	offsets, md := committedWithMetadata(t, cl, "g")
	if !maps.Equal(offsets, want) {
		t.Fatalf("committed after Close = %v; want %v (the contiguous marks)", offsets, want)
	}
	for p := range kafkaTestPartitions {
		if md[p] != wantMeta[p] {
			t.Errorf("committed metadata of partition %d = %q; want %q", p, md[p], wantMeta[p])
		}
	}
	if n := lb.Count("nacked messages waiting for redelivery"); n != 1 {
		t.Errorf("logged %d times that nacked messages were left; want 1", n)
	}

	b, _ := newKafkaSource(t, cfg, 100)
	gotIDs := ids(fetchN(t, b, 2, 100))
	slices.Sort(gotIDs)
	if want := []string{"topic/1/4", "topic/3/0"}; !slices.Equal(gotIDs, want) {
		t.Fatalf("after restart got %v; want %v, the nacked messages only", gotIDs, want)
	}
	expectNothing(t, b, 300*time.Millisecond)
}

// rejectCommits makes the cluster close the connection of every OffsetCommit
// while reject is true, as if the committing process had died before the
// commit reached the broker.
func rejectCommits(c *kfake.Cluster, reject *atomic.Bool) {
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !reject.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("crashed"), true
	})
}

// The crash test: a member acks some messages, a later part of them never
// gets committed (it dies), and the next member of the group must get every
// message that was not acked, and again no more than those acked after the
// last commit.
func TestKafkaCrashLosesNothingAndDuplicatesOnlyWhatWasAckedAfterTheLastCommit(t *testing.T) {
	t.Parallel()
	const perPartition = 50
	c, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, perPartition, allPartitions...)
	var reject atomic.Bool
	rejectCommits(c, &reject)
	a, _ := newKafkaSource(t, cfg, 1000)

	byID := make(map[string]*shaper.Message)
	for _, m := range fetchN(t, a, 4*perPartition, 50) {
		byID[m.ID] = m
	}
	acked := make(map[string]bool)
	ackIDs := func(ids []string) {
		for _, i := range permutation(len(ids), uint64(len(acked))) {
			ack(t, byID[ids[i]])
			acked[ids[i]] = true
		}
	}
	// Committed: offsets 0..19 of every partition but topic/0/7.
	var first []string
	for p := range kafkaTestPartitions {
		for o := range 20 {
			if id := fmt.Sprintf("topic/%d/%d", p, o); id != "topic/0/7" {
				first = append(first, id)
			}
		}
	}
	ackIDs(first)
	waitCommitted(t, cl, "g", map[int]int64{0: 7, 1: 20, 2: 20, 3: 20})
	waitCommittedMetadata(t, cl, "g", 0, "s1:7:1+12") // 8..19

	// Acked, never committed: offsets 20..34 and topic/0/7. Then the crash.
	reject.Store(true)
	second := []string{"topic/0/7"}
	for p := range kafkaTestPartitions {
		for o := 20; o < 35; o++ {
			second = append(second, fmt.Sprintf("topic/%d/%d", p, o))
		}
	}
	ackIDs(second)
	if err := a.Close(context.Background()); err != nil {
		t.Logf("Close of the crashed member: %v", err)
	}
	atCrash := committed(t, cl, "g")
	if want := (map[int]int64{0: 7, 1: 20, 2: 20, 3: 20}); !maps.Equal(atCrash, want) {
		t.Fatalf("committed after the crash = %v; want %v", atCrash, want)
	}
	reject.Store(false)

	// The next member gets what is left: what was not acked, and what was
	// acked after the last commit (the commit's metadata has topic/0/8..19
	// as finished, above its offset 7).
	b, _ := newKafkaSource(t, cfg, 1000)
	window := len(second) // acked after the last commit
	unacked := 4*perPartition - len(acked)
	got := fetchN(t, b, unacked+window, 100)
	expectNothing(t, b, 300*time.Millisecond)
	seen := make(map[string]bool)
	var lost, dups int
	for _, m := range got {
		if seen[m.ID] {
			t.Errorf("%s delivered twice by the new member", m.ID)
		}
		seen[m.ID] = true
		if acked[m.ID] {
			dups++
		}
	}
	for id := range byID {
		if !acked[id] && !seen[id] {
			lost++
		}
	}
	t.Logf("crash: %d messages, %d acked (%d of them after the last commit), %d unacked; "+
		"new member got %d: %d lost, %d duplicates", len(byID), len(acked), window, unacked, len(got), lost, dups)
	if lost != 0 {
		t.Errorf("lost %d unacked messages; want 0", lost)
	}
	if dups > window {
		t.Errorf("%d duplicates; want at most %d (acked after the last commit)", dups, window)
	}
}

func TestKafkaTwoMembersSplitThePartitionsAndDeliverEachMessageOnce(t *testing.T) {
	t.Parallel()
	const perPartition = 25
	_, cl, cfg := startKafkaGroup(t)
	srcs := make([]*Kafka, 2)
	for i := range srcs {
		srcs[i], _ = newKafkaSource(t, cfg, 100)
	}
	waitGroupStable(t, cl, "g", 2)
	produce(t, cl, 0, perPartition, allPartitions...)

	var mu sync.Mutex
	count := make(map[string]int)
	partitions := make([]map[int]bool, len(srcs))
	var wg sync.WaitGroup
	for i, src := range srcs {
		partitions[i] = make(map[int]bool)
		wg.Go(func() {
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				mu.Lock()
				done := len(count) == 4*perPartition
				mu.Unlock()
				if done {
					return
				}
				msgs, err := fetch(src, 10, 200*time.Millisecond)
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("member %d: Fetch: %v", i, err)
					return
				}
				mu.Lock()
				for _, m := range msgs {
					count[m.ID]++
					p, _ := partitionOffset(t, m.ID)
					partitions[i][p] = true
					if err := m.Receipt.Ack(context.Background()); err != nil {
						t.Errorf("Ack(%s): %v", m.ID, err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, src := range srcs {
		closeSource(t, src)
	}

	if len(count) != 4*perPartition {
		t.Fatalf("delivered %d distinct messages; want %d", len(count), 4*perPartition)
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("%s delivered %d times; want once", id, n)
		}
	}
	for p := range kafkaTestPartitions {
		if partitions[0][p] == partitions[1][p] {
			t.Errorf("partition %d consumed by both members or neither (%v, %v); want exactly one", p, partitions[0], partitions[1])
		}
	}
	if len(partitions[0]) == 0 || len(partitions[1]) == 0 {
		t.Errorf("members consumed partitions %v and %v; want both some", partitions[0], partitions[1])
	}
	waitCommitted(t, cl, "g", everyPartition(perPartition))
}

func TestKafkaNackRedeliversTheSameMessageAfterDelayAndHoldsTheCommit(t *testing.T) {
	t.Parallel()
	cl, _, src := kafkaMember(t, 3, 100, 0)

	got := fetchN(t, src, 3, 10)
	if got[1].ID != "topic/0/1" {
		t.Fatalf("second message = %s; want topic/0/1", got[1].ID)
	}
	const delay = 300 * time.Millisecond
	ack(t, got[0])
	nackedAt := time.Now()
	if err := got[1].Receipt.Nack(context.Background(), delay); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	ack(t, got[2])
	if err := got[1].Receipt.Ack(context.Background()); !errors.Is(err, ErrAlreadySettled) {
		t.Errorf("Ack after Nack = %v; want ErrAlreadySettled", err)
	}
	if err := got[0].Receipt.Ack(context.Background()); !errors.Is(err, ErrAlreadySettled) {
		t.Errorf("second Ack = %v; want ErrAlreadySettled", err)
	}
	waitCommitted(t, cl, "g", map[int]int64{0: 1, 1: -1, 2: -1, 3: -1})

	again := fetchN(t, src, 1, 10)[0]
	if waited := time.Since(nackedAt); waited < delay {
		t.Errorf("redelivered after %v; want no sooner than %v", waited, delay)
	}
	if again.ID != got[1].ID || string(again.Payload) != "p0-1" {
		t.Errorf("redelivered %s %q; want %s %q", again.ID, again.Payload, got[1].ID, "p0-1")
	}
	if c := committed(t, cl, "g"); c[0] != 1 {
		t.Errorf("committed offset of partition 0 while redelivered = %d; want 1", c[0])
	}

	// A message due again comes before newer ones, even those already fetched
	// by the reader.
	produce(t, cl, 3, 2, 0)
	if err := again.Receipt.Nack(context.Background(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	next := fetchN(t, src, 3, 10)
	if want := []string{"topic/0/1", "topic/0/3", "topic/0/4"}; !slices.Equal(ids(next), want) {
		t.Fatalf("after Nack(0) fetched %v; want %v", ids(next), want)
	}
	ack(t, next...)
	waitCommitted(t, cl, "g", map[int]int64{0: 5, 1: -1, 2: -1, 3: -1})
}

func TestKafkaLagCountsMessagesBehindTheLastFetched(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, 50, 1)
	produce(t, cl, 0, 3, 2)
	src, _ := newKafkaSource(t, cfg, 100)

	last := make(map[int]int64) // partition -> last offset fetched
	for last[1] < 9 {
		for _, m := range fetchN(t, src, 1, 1) {
			p, o := partitionOffset(t, m.ID)
			last[p] = o
		}
	}
	lag := src.Lag()
	if lag["1"] != 40 {
		t.Errorf(`Lag()["1"] after fetching 10 of 50 = %d; want 40 (all: %v)`, lag["1"], lag)
	}
	if o, ok := last[2]; ok && lag["2"] != 3-o-1 {
		t.Errorf(`Lag()["2"] after fetching up to offset %d of 3 = %d; want %d`, o, lag["2"], 3-o-1)
	}
	if _, ok := lag["0"]; ok {
		t.Errorf(`Lag() has partition 0, which holds no message: %v`, lag)
	}
}

// Fetch calls whose ctx ends at every moment (before, during and after the
// reader hands a message over) must never drop a message.
func TestKafkaFetchLosesNoMessageWhenContextsEnd(t *testing.T) {
	t.Parallel()
	const n = 400
	_, _, src := kafkaMember(t, n/4, 1000, allPartitions...)

	seen := make(map[string]int)
	timeouts := []time.Duration{0, time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond}
	for i := 0; len(seen) < n && i < 200000; i++ {
		msgs, err := fetch(src, 1+i%7, timeouts[i%len(timeouts)])
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fetch: %v", err)
		}
		if err != nil && len(msgs) > 0 {
			t.Fatalf("Fetch returned %d messages with %v; want messages or an error", len(msgs), err)
		}
		for _, m := range msgs {
			seen[m.ID]++
			ack(t, m)
		}
	}
	if len(seen) != n {
		t.Fatalf("fetched %d distinct messages; want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s fetched %d times; want once", id, k)
		}
	}
}

func TestKafkaSurvivesTheBrokerGoingAwayAndComingBack(t *testing.T) {
	t.Parallel()
	port := freeport.Get(t)
	dir := t.TempDir() // kfake keeps the log and the group's offsets here across the restart
	opts := []kfake.Opt{kfake.Ports(port), kfake.DataDir(dir)}
	c1 := startKfake(t, opts...)
	cl1 := kafkaClient(t, c1)
	produce(t, cl1, 0, 5, 0)
	src, lb := newKafkaSource(t, kafkaConfig(c1.ListenAddrs(), "g"), 100)
	ack(t, fetchN(t, src, 5, 10)...)
	waitCommitted(t, cl1, "g", map[int]int64{0: 5, 1: -1, 2: -1, 3: -1})
	waitReady(t, src)
	cl1.Close()

	c1.Close()
	err := waitNotReady(t, src, "kafka: brokers unreachable: dial tcp 127.0.0.1:"+strconv.Itoa(port))
	t.Logf("Ready() during the outage: %v", err)
	expectNothing(t, src, 300*time.Millisecond)

	c2 := startKfake(t, opts...)
	cl2 := kafkaClient(t, c2)
	produce(t, cl2, 5, 5, 0)
	got := fetchN(t, src, 5, 10)
	for i, m := range got {
		if want := fmt.Sprintf("p0-%d", 5+i); string(m.Payload) != want {
			t.Errorf("after the restart message %d = %s %q; want %q", i, m.ID, m.Payload, want)
		}
	}
	ack(t, got...)
	waitReady(t, src)
	waitCommitted(t, cl2, "g", map[int]int64{0: 10, 1: -1, 2: -1, 3: -1})

	notReady, ready := lb.Count(`level=WARN msg="kafka: source not ready"`), lb.Count(`level=INFO msg="kafka: source ready"`)
	t.Logf("logged %d times not ready, %d times ready", notReady, ready)
	if notReady < 1 || ready != notReady+1 {
		t.Errorf(`logged "not ready" %d times and "ready" %d times; want alternating transitions, at least one outage`, notReady, ready)
	}
}

func TestKafkaReadyNamesTheProblemAndNewKafkaDoesNotFail(t *testing.T) {
	t.Parallel()
	plain := startKfake(t)
	secured := startKfake(t, kfake.EnableSASL(), kfake.Superuser(kafkaconn.SASLPlain, "shaper", "right"))
	tests := []struct {
		name    string
		brokers []string
		topic   string
		sasl    *kafkaconn.SASLConfig
		want    string
	}{
		{
			name:    "unknown topic",
			brokers: plain.ListenAddrs(),
			topic:   "missing",
			want:    `kafka: topic "missing" not found`,
		},
		{
			name:    "unreachable brokers",
			brokers: []string{"127.0.0.1:1"},
			topic:   kafkaTestTopic,
			want:    "kafka: brokers unreachable: dial tcp 127.0.0.1:1: connect: connection refused",
		},
		{
			name:    "bad SASL password",
			brokers: secured.ListenAddrs(),
			topic:   kafkaTestTopic,
			sasl:    &kafkaconn.SASLConfig{Mechanism: kafkaconn.SASLPlain, Username: "shaper", Password: "wrong"},
			want:    "kafka: SASL authentication failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := kafkaConfig(tt.brokers, "g")
			cfg.Topic, cfg.SASL = tt.topic, tt.sasl
			src, lb := newKafkaSource(t, cfg, 100)
			err := waitNotReady(t, src, tt.want)
			t.Logf("Ready() = %v", err)
			if tt.sasl != nil && strings.Contains(err.Error(), tt.sasl.Password) {
				t.Errorf("Ready() = %v; must not show the password", err)
			}
			expectNothing(t, src, 500*time.Millisecond)
			if err := src.Ready(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Ready() later = %v; want an error containing %q", err, tt.want)
			}
			if n := lb.Count(`level=WARN msg="kafka: source not ready"`); n != 1 {
				t.Errorf(`logged "source not ready" %d times; want once`, n)
			}
		})
	}
}

func TestKafkaConsumesAndCommitsWithSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{kafkaconn.SASLPlain, kafkaconn.SASLScramSHA256} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c := startKfake(t, kfake.EnableSASL(), kfake.Superuser(mech, "shaper", "right"))
			cl := kafkaClient(t, c, kgo.SASL(kgoSASL(t, mech, "shaper", "right")))
			produce(t, cl, 0, 3, 0)
			cfg := kafkaConfig(c.ListenAddrs(), "g")
			cfg.SASL = &kafkaconn.SASLConfig{Mechanism: mech, Username: "shaper", Password: "right"}
			src, _ := newKafkaSource(t, cfg, 100)
			ack(t, fetchN(t, src, 3, 10)...)
			waitReady(t, src)
			// Commits go straight to the coordinator, over a connection that authenticates too.
			waitCommitted(t, cl, "g", map[int]int64{0: 3, 1: -1, 2: -1, 3: -1})
		})
	}
}

// kgoSASL is the test client's SASL mechanism.
func kgoSASL(t *testing.T, mech, user, pass string) sasl.Mechanism {
	t.Helper()
	switch mech {
	case kafkaconn.SASLPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case kafkaconn.SASLScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	}
	t.Fatalf("mechanism %s", mech)
	return nil
}

// The end of a generation commits what this member finished, before it
// rejoins and may lose its partitions.
func TestKafkaRebalanceCommitsWhatIsFinished(t *testing.T) {
	t.Parallel()
	c, cl, cfg := startKafkaGroup(t)
	// The broker counts the commits it is sent, whenever they come.
	var commits atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		commits.Add(1)
		return nil, nil, false
	})
	produce(t, cl, 0, 10, allPartitions...)
	cfg.CommitInterval = time.Hour // only the end of a generation commits
	a, _ := newKafkaSource(t, cfg, 100)
	waitGroupStable(t, cl, "g", 1)

	var held *shaper.Message
	for _, m := range fetchN(t, a, 40, 100) {
		if m.ID == "topic/0/3" {
			held = m
			continue
		}
		ack(t, m)
	}
	if got := committed(t, cl, "g"); !maps.Equal(got, everyPartition(-1)) {
		t.Fatalf("committed before the rebalance = %v; want none (CommitInterval is an hour)", got)
	}

	newKafkaSource(t, cfg, 100) // joins: a rebalance
	waitGroupStable(t, cl, "g", 2)
	waitCommitted(t, cl, "g", map[int]int64{0: 3, 1: 10, 2: 10, 3: 10})
	// One commit in all, the end of the generation's: the acks, made
	// asynchronously into commits, committed nothing of their own.
	if n := commits.Load(); n != 1 {
		t.Errorf("the broker was sent %d commits by the time the rebalance's arrived; want 1 (CommitInterval is an hour)", n)
	}
	ack(t, held)
}

func TestKafkaStartsConsumingWhenTheMissingTopicAppears(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	cfg.Topic = "late"
	src, _ := newKafkaSource(t, cfg, 100)
	waitNotReady(t, src, `kafka: topic "late" not found`)
	expectNothing(t, src, 200*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "late", 2, 1
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	produceRecords(t, cl, &kgo.Record{Topic: "late", Partition: 1, Value: []byte("hello")})
	got := fetchN(t, src, 1, 10)
	if got[0].ID != "late/1/0" || string(got[0].Payload) != "hello" {
		t.Fatalf("fetched %s %q; want late/1/0 %q", got[0].ID, got[0].Payload, "hello")
	}
	ack(t, got...)
	waitReady(t, src)
}

// isRevoked reports whether m's receipt says its partition is not this
// member's.
func isRevoked(m *shaper.Message) bool {
	r, ok := m.Receipt.(shaper.Revocable)
	return ok && r.Revoked()
}

// revokedPartitions returns, per partition of msgs, whether its receipts
// report Revoked, and fails the test if the receipts of one partition
// disagree.
func revokedPartitions(t *testing.T, msgs []*shaper.Message) map[int]bool {
	t.Helper()
	out := make(map[int]bool)
	for _, m := range msgs {
		p, _ := partitionOffset(t, m.ID)
		r := isRevoked(m)
		if was, ok := out[p]; ok && was != r {
			t.Fatalf("receipts of partition %d disagree on Revoked()", p)
		}
		out[p] = r
	}
	return out
}

// waitPartitionsSplit waits until the receipts of msgs, which span every
// partition, report Revoked for some partitions (a new member took them) and
// not for the others (this member kept them), as they do once this member
// begins the next generation. It returns Revoked per partition and the
// partitions taken, lowest first, and fails the test if the partitions are
// not split within 10s.
func waitPartitionsSplit(t *testing.T, msgs []*shaper.Message) (map[int]bool, []int) {
	t.Helper()
	var byPartition map[int]bool
	var taken []int
	if !testwait.Until(10*time.Second, func() bool {
		byPartition, taken = revokedPartitions(t, msgs), nil
		for p, r := range byPartition {
			if r {
				taken = append(taken, p)
			}
		}
		return len(taken) > 0 && len(taken) < kafkaTestPartitions
	}) {
		t.Fatalf("Revoked() by partition = %v; want some partitions revoked (taken by the new member) and some kept", byPartition)
	}
	slices.Sort(taken)
	return byPartition, taken
}

func TestKafkaRebalanceRevokesTheReceiptsOfThePartitionsAnotherMemberTook(t *testing.T) {
	t.Parallel()
	const perPartition = 25
	cl, cfg, a := kafkaMember(t, perPartition, 1000, allPartitions...)
	got := fetchN(t, a, 4*perPartition, 1000) // the whole backlog; nothing acked
	for p, r := range revokedPartitions(t, got) {
		if r {
			t.Fatalf("partition %d: Revoked() = true before any rebalance; want false", p)
		}
	}

	b, _ := newKafkaSource(t, cfg, 1000)
	waitGroupStable(t, cl, "g", 2)
	// The group is stable once both members synced; a's receipts of the
	// partitions it keeps report Revoked() false again once it begins the
	// new generation.
	byPartition, taken := waitPartitionsSplit(t, got)
	t.Logf("b took partitions %v; a kept the others", taken)

	// b starts the partitions it took where the group has nothing
	// committed: from the beginning. It gets nothing of a's.
	bGot := fetchN(t, b, len(taken)*perPartition, 100)
	for _, m := range bGot {
		if p, _ := partitionOffset(t, m.ID); !byPartition[p] {
			t.Errorf("b fetched %s, of partition %d that a kept", m.ID, p)
		}
	}
	expectNothing(t, b, 300*time.Millisecond)
	if lag := a.Lag(); len(lag) != kafkaTestPartitions-len(taken) {
		t.Errorf("a's Lag() = %v; want only the partitions it kept", lag)
	}

	// a's receipts of the partitions b took commit nothing and come back
	// from nowhere, whether acked or nacked.
	var keptMsgs []*shaper.Message
	for i, m := range got {
		p, _ := partitionOffset(t, m.ID)
		switch {
		case !byPartition[p]:
			keptMsgs = append(keptMsgs, m)
		case i%2 == 0:
			ack(t, m)
		default:
			if err := m.Receipt.Nack(context.Background(), 0); err != nil {
				t.Fatalf("Nack(%s): %v", m.ID, err)
			}
		}
	}
	expectNothing(t, a, 300*time.Millisecond)
	none := everyPartition(-1)
	if got := committed(t, cl, "g"); !maps.Equal(got, none) {
		t.Fatalf("committed after a settled its revoked receipts = %v; want %v", got, none)
	}

	// a's receipts of the partitions it kept are as good as before.
	ack(t, keptMsgs...)
	want := make(map[int]int64)
	for p := range kafkaTestPartitions {
		want[p] = -1
		if !byPartition[p] {
			want[p] = perPartition
		}
	}
	waitCommitted(t, cl, "g", want)
	ack(t, bGot...)
	waitCommitted(t, cl, "g", everyPartition(perPartition))
}

// memberStats counts what a driven member did.
type memberStats struct {
	fetched   atomic.Int64 // messages Fetch returned, redeliveries included
	delivered atomic.Int64 // messages sent
	revoked   atomic.Int64 // messages nacked because they reported Revoked
}

// drive runs src the way shaper.Pipeline does, until ctx ends: it fetches
// into a bucket of capacity messages, and sends one message every pace with
// up to four sends at once, each taking a millisecond before its Ack. A
// message whose receipt reports Revoked is nacked, never sent, whether it is
// taken from the bucket or about to be sent. send records a delivery.
func drive(ctx context.Context, t *testing.T, src *Kafka, capacity int, pace time.Duration, send func(id string), st *memberStats) {
	var bucket []*shaper.Message
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	slots := make(chan struct{}, 4)
	nack := func(m *shaper.Message) {
		st.revoked.Add(1)
		if err := m.Receipt.Nack(context.Background(), 0); err != nil {
			t.Errorf("Nack(%s): %v", m.ID, err)
		}
	}
	var next time.Time
	for ctx.Err() == nil {
		if room := capacity - len(bucket); room > 0 {
			wait := time.Millisecond
			if len(bucket) == 0 {
				wait = 50 * time.Millisecond
			}
			msgs, err := fetch(src, room, wait)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Fetch: %v", err)
				return
			}
			st.fetched.Add(int64(len(msgs)))
			bucket = append(bucket, msgs...)
		}
		for len(bucket) > 0 && isRevoked(bucket[0]) { // Pipeline.take
			nack(bucket[0])
			bucket = bucket[1:]
		}
		if len(bucket) == 0 || time.Now().Before(next) {
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // the sink is busy
		}
		m := bucket[0]
		bucket = bucket[1:]
		next = time.Now().Add(pace)
		inFlight.Go(func() {
			defer func() { <-slots }()
			if isRevoked(m) { // Pipeline.attempt
				nack(m)
				return
			}
			send(m.ID)
			st.delivered.Add(1)
			time.Sleep(time.Millisecond)
			ack(t, m)
		})
	}
}

// The problem this source was rebuilt for: member a fetches most of a
// backlog into its bucket, member b joins mid-stream, and the two together
// must still deliver every message once.
func TestKafkaTwoMembersDeliverABacklogOnceAcrossARebalanceMidStream(t *testing.T) {
	t.Parallel()
	const n, capacity, pace = 400, 1000, 5 * time.Millisecond
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, n/kafkaTestPartitions, allPartitions...)

	var mu sync.Mutex
	deliveries := make(map[string]int)
	byMember := make([]map[int]int, 2) // member -> partition -> deliveries
	send := func(member int) func(string) {
		byMember[member] = make(map[int]int)
		return func(id string) {
			p, _ := partitionOffset(t, id)
			mu.Lock()
			defer mu.Unlock()
			deliveries[id]++
			byMember[member][p]++
		}
	}
	distinct := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(deliveries)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var sa, sb memberStats
	a, _ := newKafkaSource(t, cfg, capacity)
	sendA, sendB := send(0), send(1)
	wg.Go(func() { drive(ctx, t, a, capacity, pace, sendA, &sa) })
	if !testwait.Until(20*time.Second, func() bool { return sa.fetched.Load() >= 3*n/4 && sa.delivered.Load() >= n/10 }) {
		t.Fatalf("a fetched %d and delivered %d; want most of the backlog fetched before b joins", sa.fetched.Load(), sa.delivered.Load())
	}
	fetchedAt, sentAt := sa.fetched.Load(), sa.delivered.Load()
	b, _ := newKafkaSource(t, cfg, capacity)
	wg.Go(func() { drive(ctx, t, b, capacity, pace, sendB, &sb) })

	// Until nothing is left that could come again: every message
	// delivered, every one a member fetched settled (delivered, or nacked
	// as revoked) and every offset committed. A duplicate shows by then;
	// the checks below tell what was not reached.
	settled := func(st *memberStats) bool { return st.fetched.Load() == st.delivered.Load()+st.revoked.Load() }
	want := everyPartition(n / 4)
	testwait.Until(30*time.Second, func() bool {
		return distinct() == n && settled(&sa) && settled(&sb) && maps.Equal(committed(t, cl, "g"), want)
	})
	cancel()
	wg.Wait()
	closeSource(t, a)
	closeSource(t, b)

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, k := range deliveries {
		total += k
	}
	t.Logf("b joined after a had fetched %d and delivered %d; a: fetched %d (redeliveries included), delivered %d, nacked %d as revoked (by partition %v); b: fetched %d, delivered %d (by partition %v); %d distinct in %d deliveries: %d duplicates",
		fetchedAt, sentAt, sa.fetched.Load(), sa.delivered.Load(), sa.revoked.Load(), byMember[0], sb.fetched.Load(), sb.delivered.Load(), byMember[1], len(deliveries), total, total-len(deliveries))
	if len(deliveries) != n {
		t.Errorf("delivered %d distinct messages; want %d", len(deliveries), n)
	}
	for id, k := range deliveries {
		if k != 1 {
			t.Errorf("%s delivered %d times; want once", id, k)
		}
	}
	if sb.delivered.Load() == 0 || sa.revoked.Load() == 0 {
		t.Errorf("b delivered %d, a nacked %d as revoked; want a rebalance mid-stream (both > 0)", sb.delivered.Load(), sa.revoked.Load())
	}
	if got := committed(t, cl, "g"); !maps.Equal(got, want) {
		t.Errorf("committed after both closed = %v; want %v", got, want)
	}
}

// A partition that stays with a member across a rebalance keeps its state:
// its unfinished message stays valid, and nothing of it is fetched again,
// while a partition another member took restarts there from the committed
// offset and skips what the commit's metadata has as finished after it.
func TestKafkaKeptPartitionKeepsItsUnfinishedMessagesAndFetchesNothingTwice(t *testing.T) {
	t.Parallel()
	const perPartition, held = 25, 3
	cl, cfg, a := kafkaMember(t, perPartition, 1000, allPartitions...)
	got := fetchN(t, a, 4*perPartition, 1000)
	var holding []*shaper.Message // one per partition, as if waiting to be retried
	for _, m := range got {
		if _, o := partitionOffset(t, m.ID); o == held {
			holding = append(holding, m)
			continue
		}
		ack(t, m)
	}
	waitCommitted(t, cl, "g", everyPartition(held))
	for p := range kafkaTestPartitions {
		waitCommittedMetadata(t, cl, "g", p, fmt.Sprintf("s1:%d:1+%d", held, perPartition-held-1))
	}

	b, _ := newKafkaSource(t, cfg, 1000)
	waitGroupStable(t, cl, "g", 2)
	byPartition, taken := waitPartitionsSplit(t, holding)
	kept := kafkaTestPartitions - len(taken)

	// a fetches nothing again: its kept partitions resume after the last
	// offset it fetched.
	expectNothing(t, a, 300*time.Millisecond)
	// b restarts the partitions it took at the committed offset, and skips
	// what a acked past it: it gets the message a held, and nothing else.
	bGot := fetchN(t, b, len(taken), 100)
	for _, m := range bGot {
		if p, o := partitionOffset(t, m.ID); !byPartition[p] || o != held {
			t.Errorf("b fetched %s; want offset %d of the partitions it took only", m.ID, held)
		}
	}
	expectNothing(t, b, 300*time.Millisecond)
	t.Logf("partitions kept by a: %d, fetched again: 0; taken by b: %d, b redelivered %d messages a had acked past its unfinished one",
		kept, len(taken), len(bGot)-len(taken))

	ack(t, holding...) // the kept ones commit; the revoked ones commit nothing
	ack(t, bGot...)
	waitCommitted(t, cl, "g", everyPartition(perPartition))
}

// The promise of the commit metadata: after a member closes with messages
// unfinished, the next member of the group gets those messages, and not the
// ones its partition finished after them.
func TestKafkaRestartDeliversOnlyTheMessagesWithoutAnOutcome(t *testing.T) {
	t.Parallel()
	cl, cfg, a := kafkaMember(t, 100, 1000, 0)
	for _, m := range fetchN(t, a, 100, 100) {
		switch m.ID {
		case "topic/0/10", "topic/0/50": // as a drain leaves a pending retry
			if err := m.Receipt.Nack(context.Background(), time.Hour); err != nil {
				t.Fatalf("Nack(%s): %v", m.ID, err)
			}
		default:
			ack(t, m)
		}
	}
	closeSource(t, a)
	offsets, md := committedWithMetadata(t, cl, "g")
	if offsets[0] != 10 || md[0] != "s1:10:1+39,1+49" {
		t.Fatalf("committed partition 0 at %d with metadata %q; want 10 with %q (11..49 and 51..99 finished)",
			offsets[0], md[0], "s1:10:1+39,1+49")
	}

	b, lb := newKafkaSource(t, cfg, 1000)
	got := fetchN(t, b, 2, 100)
	if want := []string{"topic/0/10", "topic/0/50"}; !slices.Equal(ids(got), want) {
		t.Fatalf("after the restart got %v; want %v, the messages without an outcome", ids(got), want)
	}
	expectNothing(t, b, 300*time.Millisecond)
	produce(t, cl, 100, 3, 0)
	next := fetchN(t, b, 3, 100)
	if want := []string{"topic/0/100", "topic/0/101", "topic/0/102"}; !slices.Equal(ids(next), want) {
		t.Fatalf("then got %v; want %v, what follows offset 99", ids(next), want)
	}
	ack(t, got...)
	ack(t, next...)
	waitCommitted(t, cl, "g", map[int]int64{0: 103, 1: -1, 2: -1, 3: -1})
	waitCommittedMetadata(t, cl, "g", 0, "")
	if n := lb.Count("skipping the messages finished above the committed offset"); n != 1 {
		t.Errorf("logged %d times that finished messages were skipped; want 1", n)
	}
}

// The rebalance case: a member leaves with unfinished messages, and the
// member that takes its partitions delivers those, not what the first one
// finished after them.
func TestKafkaMemberLeavingWithUnfinishedMessagesHandsOverOnlyThose(t *testing.T) {
	t.Parallel()
	const perPartition = 25
	_, cl, cfg := startKafkaGroup(t)
	a, _ := newKafkaSource(t, cfg, 1000)
	b, _ := newKafkaSource(t, cfg, 1000)
	waitGroupStable(t, cl, "g", 2)
	produce(t, cl, 0, perPartition, allPartitions...)

	// a leaves offsets 3 and 7 of its partitions unfinished (nacked, as a
	// drain does with pending retries) and finishes the rest; b finishes
	// all it gets.
	var held []string
	aParts, bParts := make(map[int]bool), make(map[int]bool)
	for n, deadline := 0, time.Now().Add(20*time.Second); n < 4*perPartition; {
		if time.Now().After(deadline) {
			t.Fatalf("the two members fetched %d messages; want %d", n, 4*perPartition)
		}
		for _, src := range []*Kafka{a, b} {
			msgs, err := fetch(src, 100, 50*time.Millisecond)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Fetch: %v", err)
			}
			n += len(msgs)
			for _, m := range msgs {
				p, o := partitionOffset(t, m.ID)
				if src == b {
					bParts[p] = true
					ack(t, m)
					continue
				}
				aParts[p] = true
				if o == 3 || o == 7 {
					held = append(held, m.ID)
					if err := m.Receipt.Nack(context.Background(), time.Hour); err != nil {
						t.Fatalf("Nack(%s): %v", m.ID, err)
					}
					continue
				}
				ack(t, m)
			}
		}
	}
	if len(aParts) == 0 || len(bParts) == 0 {
		t.Fatalf("a consumed partitions %v, b %v; want both some", aParts, bParts)
	}

	closeSource(t, a) // a leaves: b takes a's partitions
	got := fetchN(t, b, len(held), 100)
	gotIDs := ids(got)
	slices.Sort(gotIDs)
	slices.Sort(held)
	if !slices.Equal(gotIDs, held) {
		t.Fatalf("b got %v from the partitions a left; want %v, the messages a left unfinished", gotIDs, held)
	}
	expectNothing(t, b, 300*time.Millisecond)
	t.Logf("a left partitions %v with %d messages unfinished and %d finished after them; b redelivered %d",
		slices.Sorted(maps.Keys(aParts)), len(held), len(aParts)*perPartition-len(held)-len(aParts)*3, len(got))
	ack(t, got...)
	waitCommitted(t, cl, "g", everyPartition(perPartition))
}

// Metadata another tool left beside the committed offset, or left beside an
// offset another tool moved, is ignored: the partition is read from the
// committed offset, all of it.
func TestKafkaIgnoresCommitMetadataItDidNotWrite(t *testing.T) {
	t.Parallel()
	c, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, 10, 0, 1, 2)
	give := map[int]string{
		0: "written by another tool",
		1: "s1:4:1+3",     // for offset 4, but the group is at 5
		2: "s1:5:1+3,0+1", // garbled
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	admin := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...), Transport: tr}
	req := &kafka.OffsetCommitRequest{GroupID: "g", GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{}} // an admin commit to the empty group
	for p, md := range give {
		req.Topics[kafkaTestTopic] = append(req.Topics[kafkaTestTopic], kafka.OffsetCommit{Partition: p, Offset: 5, Metadata: md})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.OffsetCommit(ctx, req)
	if err != nil {
		t.Fatalf("offset commit: %v", err)
	}
	for _, p := range resp.Topics[kafkaTestTopic] {
		if p.Error != nil {
			t.Fatalf("offset commit partition %d: %v", p.Partition, p.Error)
		}
	}

	src, lb := newKafkaSource(t, cfg, 100)
	got := ids(fetchN(t, src, 15, 100))
	slices.Sort(got)
	var want []string
	for p := range 3 {
		for o := 5; o < 10; o++ {
			want = append(want, fmt.Sprintf("topic/%d/%d", p, o))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fetched %v; want %v", got, want)
	}
	expectNothing(t, src, 300*time.Millisecond)
	if n := lb.Count("commit metadata ignored"); n != 3 {
		t.Errorf("logged %d times that commit metadata was ignored; want 3", n)
	}
}

// offsetCommitAnswer is an answer to req in which every partition has the
// error code that code gives it (0: committed).
func offsetCommitAnswer(req *kmsg.OffsetCommitRequest, code func(kmsg.OffsetCommitRequestTopicPartition) int16) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code(rp)
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// A broker whose offset.metadata.max.bytes is below the 4 KiB the source
// writes refuses the commit: the source commits again with less metadata,
// lowest offsets first, and whatever it left out comes again, nothing else.
func TestKafkaCommitsLessMetadataWhenTheBrokerRefusesItAsTooLarge(t *testing.T) {
	t.Parallel()
	const n, limit = 200, 100
	c := startKfake(t)
	var refused atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		tooLarge := false
		resp := offsetCommitAnswer(kreq.(*kmsg.OffsetCommitRequest), func(rp kmsg.OffsetCommitRequestTopicPartition) int16 {
			if rp.Metadata != nil && len(*rp.Metadata) > limit {
				tooLarge = true
				return kerr.OffsetMetadataTooLarge.Code
			}
			return 0
		})
		if !tooLarge {
			return nil, nil, false // the cluster commits it
		}
		refused.Add(1)
		return resp, nil, true // one partition per commit here: nothing else to commit
	})
	cl := kafkaClient(t, c)
	produce(t, cl, 0, n, 0)
	cfg := kafkaConfig(c.ListenAddrs(), "g")
	a, lb := newKafkaSource(t, cfg, 1000)
	for _, m := range fetchN(t, a, n, 100) {
		if _, o := partitionOffset(t, m.ID); o%2 == 0 { // every other one pending: the longest metadata
			if err := m.Receipt.Nack(context.Background(), time.Hour); err != nil {
				t.Fatalf("Nack(%s): %v", m.ID, err)
			}
			continue
		}
		ack(t, m)
	}
	closeSource(t, a)
	offsets, md := committedWithMetadata(t, cl, "g")
	runs, err := parseFinished(0, md[0])
	if err != nil {
		t.Fatalf("committed metadata %q: %v", md[0], err)
	}
	t.Logf("%d commits refused; committed %d with %d bytes of metadata: %d finished offsets of %d", refused.Load(), offsets[0], len(md[0]), len(runs), n/2)
	if offsets[0] != 0 || len(runs) == 0 || len(md[0]) > limit {
		t.Fatalf("committed %d with metadata %q; want 0 with at most %d bytes recording some finished offsets", offsets[0], md[0], limit)
	}
	if refused.Load() == 0 || lb.Count("refused the commit metadata as too large") == 0 {
		t.Errorf("%d commits refused, %d warnings logged; want both > 0", refused.Load(), lb.Count("refused the commit metadata as too large"))
	}

	skipped := make(map[string]bool)
	for _, r := range runs {
		for o := r.from; o <= r.to; o++ {
			if o%2 == 0 {
				t.Fatalf("metadata %q has offset %d finished; it was nacked", md[0], o)
			}
			skipped[fmt.Sprintf("topic/0/%d", o)] = true
		}
	}
	b, _ := newKafkaSource(t, cfg, 1000)
	got := fetchN(t, b, n-len(skipped), 100)
	expectNothing(t, b, 300*time.Millisecond)
	for _, m := range got {
		if skipped[m.ID] {
			t.Errorf("%s delivered again; the metadata has it as finished", m.ID)
		}
	}
	ack(t, got...)
	waitCommitted(t, cl, "g", map[int]int64{0: n, 1: -1, 2: -1, 3: -1})
}

// Commits go straight to the group's coordinator: it is looked up once, not
// before every commit, and again when the broker answers that it is not the
// coordinator (it moved); the refused commit is made again by itself.
func TestKafkaCommitsLookTheCoordinatorUpOnceAndAgainWhenItMoves(t *testing.T) {
	t.Parallel()
	c, cl, cfg := startKafkaGroup(t)
	var lookUps, commits atomic.Int64
	var refuse atomic.Bool
	c.ControlKey(int16(kmsg.FindCoordinator), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lookUps.Add(1)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		commits.Add(1)
		if !refuse.CompareAndSwap(true, false) {
			return nil, nil, false // the cluster commits it
		}
		return offsetCommitAnswer(kreq.(*kmsg.OffsetCommitRequest), func(kmsg.OffsetCommitRequestTopicPartition) int16 {
			return kerr.NotCoordinator.Code
		}), nil, true
	})
	const n = 8
	produce(t, cl, 0, n, 0)
	src, _ := newKafkaSource(t, cfg, 100)
	got := fetchN(t, src, n, 100)
	slices.SortFunc(got, func(a, b *shaper.Message) int {
		_, oa := partitionOffset(t, a.ID)
		_, ob := partitionOffset(t, b.ID)
		return int(oa - ob)
	})
	// ackAndAwait acks m and waits until the broker has seen want commits
	// more than before.
	ackAndAwait := func(m *shaper.Message, want int64) {
		t.Helper()
		before := commits.Load()
		ack(t, m)
		if !testwait.Until(10*time.Second, func() bool { return commits.Load() >= before+want }) {
			t.Fatalf("after acking %s the broker saw %d commits; want %d", m.ID, commits.Load()-before, want)
		}
	}

	ackAndAwait(got[0], 1)
	first := lookUps.Load()
	for _, m := range got[1:6] {
		ackAndAwait(m, 1)
	}
	if n := lookUps.Load() - first; n != 0 {
		t.Errorf("5 commits looked the coordinator up %d times; want 0 (it is known)", n)
	}
	refuse.Store(true)
	ackAndAwait(got[6], 2) // refused, then made again without another ack
	if n := lookUps.Load() - first; n != 1 {
		t.Errorf("a commit refused as not the coordinator's and the next one looked the coordinator up %d times; want 1", n)
	}
	waitCommitted(t, cl, "g", map[int]int64{0: 7, 1: -1, 2: -1, 3: -1})
}

// Commits carry the generation: once the group has moved on, a commit of
// an ended generation is refused, whatever its offsets and metadata.
func TestKafkaCommitOfAnEndedGenerationIsRefused(t *testing.T) {
	t.Parallel()
	cl, cfg, a := kafkaMember(t, 10, 100, 0)
	ack(t, fetchN(t, a, 10, 100)...)
	waitCommitted(t, cl, "g", map[int]int64{0: 10, 1: -1, 2: -1, 3: -1})
	a.session.mu.Lock()
	old := a.session.gen
	a.session.mu.Unlock()
	if old == nil {
		t.Fatal("a runs no generation")
	}

	newKafkaSource(t, cfg, 100) // joins: a new generation
	waitGroupStable(t, cl, "g", 2)
	err := a.session.commit(old, []partitionMark{{Partition: 0, Offset: 3, Metadata: "s1:3:1+1"}})
	if !errors.Is(err, kafka.IllegalGeneration) {
		t.Errorf("commit with generation %d after the group moved on = %v; want %v", old.gen.ID, err, kafka.IllegalGeneration)
	}
	offsets, md := committedWithMetadata(t, cl, "g")
	if offsets[0] != 10 || md[0] != "" {
		t.Errorf("committed partition 0 at %d with %q; want 10 with no metadata, as before", offsets[0], md[0])
	}
}
