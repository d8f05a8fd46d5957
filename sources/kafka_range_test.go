package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// newKafkaRange starts a replay of the test topic on c and closes it when
// the test ends.
func newKafkaRange(t *testing.T, c *kfake.Cluster, opts ReplayOptions, capacity int) *KafkaRange {
	t.Helper()
	log, _ := testLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := NewKafkaRange(ctx, kafkaconn.Config{Brokers: c.ListenAddrs()}, kafkaTestTopic, capacity, opts, "shaper-test", log)
	if err != nil {
		t.Fatalf("NewKafkaRange: %v", err)
	}
	t.Cleanup(func() { closeSource(t, r) })
	return r
}

// offsetIDs returns the ids topic/p/o of offsets from..to-1 of partition p.
func offsetIDs(p int, from, to int64) []string {
	var out []string
	for o := from; o < to; o++ {
		out = append(out, fmt.Sprintf("%s/%d/%d", kafkaTestTopic, p, o))
	}
	return out
}

// sortedIDs returns the ids of msgs, sorted, and fails the test if one
// comes twice.
func sortedIDs(t *testing.T, msgs []*shaper.Message) []string {
	t.Helper()
	out := ids(msgs)
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			t.Errorf("%s handed out twice; want once", out[i])
		}
	}
	return out
}

func TestKafkaRangeHandsOutTheWholeLogOnceThenEOFAndCommitsNothing(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	cl := kafkaClient(t, c)
	produce(t, cl, 0, 25, allPartitions...)
	r := newKafkaRange(t, c, ReplayOptions{}, 30)
	// The partition readers start at once: each reads a record and waits
	// to hand it over (CI saw Read 2), none more.
	if p := r.Progress(); p.Total != 100 || p.Read > kafkaTestPartitions || p.Exhausted {
		t.Errorf("Progress() before any Fetch = %+v; want Total 100, Read at most one per partition (%d), not Exhausted", p, kafkaTestPartitions)
	}

	got := readRange(t, r, 7)
	var want []string
	for p := range kafkaTestPartitions {
		want = append(want, offsetIDs(p, 0, 25)...)
	}
	slices.Sort(want)
	if g := sortedIDs(t, got); !slices.Equal(g, want) {
		t.Fatalf("handed out %d ids %v; want the 100 of the topic", len(g), g)
	}
	if msgs, err := fetch(r, 10, 5*time.Second); !errors.Is(err, io.EOF) || len(msgs) != 0 {
		t.Errorf("Fetch after the end = %d messages, %v; want none and io.EOF at once", len(msgs), err)
	}
	ack(t, got...)
	p := r.Progress()
	wantPlaces := map[string]int64{"0": 25, "1": 25, "2": 25, "3": 25}
	if p.Total != 100 || p.Read != 100 || p.Skipped != 0 || p.Finished != 100 || p.Unfinished != 0 || !p.Exhausted || !maps.Equal(p.Places, wantPlaces) {
		t.Errorf("Progress() after acking all = %+v; want Total, Read, Finished 100, Exhausted, Places %v", p, wantPlaces)
	}
	if from, to := r.Resume(); from != "offset:0=25,1=25,2=25,3=25" || to != from {
		t.Errorf("Resume() = %q, %q; want offset:0=25,1=25,2=25,3=25 for both (nothing left)", from, to)
	}
	if err := r.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}

	// No consumer group: none exists, and the name a live source would use
	// has nothing committed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list groups: %v", err)
	}
	if len(groups.Groups) != 0 {
		t.Errorf("groups after the replay = %v; want none", groups.Groups)
	}
	for p, o := range committed(t, cl, "g") {
		if o != -1 {
			t.Errorf("committed offset of group g, partition %d = %d; want none", p, o)
		}
	}
}

func TestKafkaRangeOfAnEmptyRangeEndsAtOnceAndOfAMissingTopicFails(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	produce(t, kafkaClient(t, c), 0, 3, 1)
	r := newKafkaRange(t, c, bounds(t, "offset:3", ""), 10) // past every partition's end
	if msgs, err := fetch(r, 10, 5*time.Second); !errors.Is(err, io.EOF) || len(msgs) != 0 {
		t.Errorf("Fetch of an empty range = %d messages, %v; want none and io.EOF", len(msgs), err)
	}
	if p := r.Progress(); p.Total != 0 || !p.Exhausted {
		t.Errorf("Progress() = %+v; want Total 0, Exhausted", p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	brokers := kafkaconn.Config{Brokers: c.ListenAddrs()}
	if _, err := NewKafkaRange(ctx, brokers, "nope", 10, ReplayOptions{}, "shaper-test", nil); err == nil || !strings.Contains(err.Error(), `topic "nope" not found`) {
		t.Errorf("NewKafkaRange(missing topic) = %v; want an error naming topic \"nope\"", err)
	}
	seq := bounds(t, "seq:5", "")
	if _, err := NewKafkaRange(ctx, brokers, kafkaTestTopic, 10, seq, "shaper-test", nil); err == nil || !strings.Contains(err.Error(), "seq:N is for JetStream") {
		t.Errorf("NewKafkaRange(--from seq:5) = %v; want seq:N is for JetStream", err)
	}
}

func TestKafkaRangeTimeBoundsSelectByRecordTimestampWithToExclusive(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	cl := kafkaClient(t, c)
	t0 := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)
	// Three bands an hour apart, each starting exactly on its hour; the
	// last partition has records of the first band only.
	var recs []*kgo.Record
	for band, name := range []string{"a", "b", "c"} {
		for p := range int32(kafkaTestPartitions) {
			if p == 3 && band > 0 {
				continue
			}
			for i := range 3 {
				recs = append(recs, &kgo.Record{Partition: p, Timestamp: t0.Add(time.Duration(band)*time.Hour + time.Duration(i)*time.Second),
					Value: fmt.Appendf(nil, "%s-%d-%d", name, p, i)})
			}
		}
	}
	produceRecords(t, cl, recs...)

	from, to := t0.Add(time.Hour).Format(time.RFC3339), t0.Add(2*time.Hour).Format(time.RFC3339)
	r := newKafkaRange(t, c, bounds(t, from, to), 100)
	got := readRange(t, r, 100)
	var values []string
	for _, m := range got {
		values = append(values, string(m.Payload))
	}
	slices.Sort(values)
	want := []string{"b-0-0", "b-0-1", "b-0-2", "b-1-0", "b-1-1", "b-1-2", "b-2-0", "b-2-1", "b-2-2"}
	if !slices.Equal(values, want) {
		t.Errorf("--from %s --to %s handed out %v; want the middle band %v", from, to, values, want)
	}
	checkUnacked(t, r, 9, "offset:0=3,1=3,2=3,3=3", "offset:0=6,1=6,2=6,3=3")
	ack(t, got...)
}

func TestKafkaRangeOffsetBoundsAndResumeReplayExactlyWhatWasNotFinished(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	produce(t, kafkaClient(t, c), 0, 10, allPartitions...)
	// Partition 0 ends at 8, 1 at 6, 2 at 100 clamped to its end 10, and
	// 3, unnamed, at its end.
	r := newKafkaRange(t, c, bounds(t, "offset:2", "offset:0=8,1=6,2=100"), 100)
	got := readRange(t, r, 5)
	want := slices.Concat(offsetIDs(0, 2, 8), offsetIDs(1, 2, 6), offsetIDs(2, 2, 10), offsetIDs(3, 2, 10))
	slices.Sort(want)
	if g := sortedIDs(t, got); !slices.Equal(g, want) {
		t.Fatalf("handed out %v; want %v", g, want)
	}

	// Settle a prefix of each partition: 0 acks 2 and 3, nacks 4 and
	// leaves 5..7; 1 acks everything; 2 all but 9; 3 nothing.
	byID := map[string]*shaper.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	var acked []*shaper.Message
	for _, id := range slices.Concat(offsetIDs(0, 2, 4), offsetIDs(1, 2, 6), offsetIDs(2, 2, 9)) {
		acked = append(acked, byID[id])
	}
	ack(t, acked...)
	if err := byID["topic/0/4"].Receipt.Nack(context.Background(), time.Second); err != nil {
		t.Fatalf("Nack(topic/0/4): %v", err)
	}
	p := r.Progress()
	if p.Total != 26 || p.Finished != int64(len(acked)) || p.Unfinished != 1 {
		t.Errorf("Progress() = %+v; want Total 26, Finished %d, Unfinished 1", p, len(acked))
	}
	from, to := r.Resume()
	if from != "offset:0=4,1=6,2=9,3=2" || to != "offset:0=8,1=6,2=10,3=10" {
		t.Fatalf("Resume() = %q, %q; want offset:0=4,1=6,2=9,3=2 to offset:0=8,1=6,2=10,3=10", from, to)
	}

	again := newKafkaRange(t, c, bounds(t, from, to), 100)
	rest := readRange(t, again, 100)
	want = slices.Concat(offsetIDs(0, 4, 8), offsetIDs(2, 9, 10), offsetIDs(3, 2, 10))
	slices.Sort(want)
	if g := sortedIDs(t, rest); !slices.Equal(g, want) {
		t.Errorf("the resumed replay handed out %v; want what was not finished, %v", g, want)
	}
	if p := again.Progress(); p.Total != int64(len(want)) {
		t.Errorf("resumed Progress().Total = %d; want %d", p.Total, len(want))
	}
	ack(t, rest...)
}

// deadLetterRecord is a dead letter of message i as pipeline psp writes it.
func deadLetterRecord(partition int32, i int, reason string, omitted bool) *kgo.Record {
	hs := []kgo.RecordHeader{
		{Key: "Shaper-Reason", Value: []byte(reason)},
		{Key: "Shaper-Pipeline", Value: []byte("psp")},
		{Key: "Shaper-Source", Value: fmt.Appendf(nil, "orders/1/%d", i)},
		{Key: "Shaper-Attempts", Value: []byte("3")},
		{Key: "Shaper-Id", Value: fmt.Appendf(nil, "id-%d", i)},
		{Key: "Shaper-Error", Value: []byte("status 503")},
		{Key: "X-Trace", Value: fmt.Appendf(nil, "trace-%d", i)},
	}
	value := fmt.Appendf(nil, "payload-%d", i)
	if omitted {
		hs = append(hs, kgo.RecordHeader{Key: "Shaper-Payload-Omitted", Value: []byte("true")})
		value = nil
	}
	return &kgo.Record{Partition: partition, Value: value, Headers: hs}
}

// othersRecord is deadLetterRecord of another pipeline (pipeline; "": a
// record without Shaper-Pipeline).
func othersRecord(partition int32, i int, pipeline string) *kgo.Record {
	r := deadLetterRecord(partition, i, "exhausted", false)
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == "Shaper-Pipeline" })
	if pipeline != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "Shaper-Pipeline", Value: []byte(pipeline)})
	}
	r.Value = fmt.Appendf(nil, "secret-for-%s", pipeline)
	return r
}

func TestKafkaRangeOfDeadLettersHandsOutOnlyTheReasonAskedForAsTheOriginals(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	var recs []*kgo.Record
	for i := range 8 {
		reason := "exhausted"
		if i%2 == 1 {
			reason = "expired"
		}
		recs = append(recs, deadLetterRecord(int32(i%2*2), i, reason, false))
	}
	recs = append(recs, deadLetterRecord(1, 8, "exhausted", true), othersRecord(3, 9, "merchantB"), othersRecord(3, 10, ""))
	produceRecords(t, kafkaClient(t, c), recs...)

	r := newKafkaRange(t, c, ReplayOptions{DeadLetters: true, Pipeline: "psp", Reason: "exhausted"}, 10)
	got := readRange(t, r, 10)
	var gotIDs []string
	for _, m := range got {
		gotIDs = append(gotIDs, m.ID)
		n := strings.TrimPrefix(m.ID, "id-")
		if m.Origin != "orders/1/"+n || m.Attempts != 3 || string(m.Payload) != "payload-"+n {
			t.Errorf("%s: Origin, Attempts, Payload = %q, %d, %q; want orders/1/%s, 3, payload-%s", m.ID, m.Origin, m.Attempts, m.Payload, n, n)
		}
		if want := map[string][]string{"X-Trace": {"trace-" + n}}; !maps.EqualFunc(m.Header, want, slices.Equal) {
			t.Errorf("%s: Header = %v; want %v, no Shaper-* header", m.ID, m.Header, want)
		}
	}
	slices.Sort(gotIDs)
	if want := []string{"id-0", "id-2", "id-4", "id-6"}; !slices.Equal(gotIDs, want) {
		t.Errorf("handed out %v; want the exhausted ones with their payload, %v", gotIDs, want)
	}
	p := r.Progress()
	wantSkipped := map[string]int64{SkipOtherPipeline: 2, SkipOtherReason: 4, SkipPayloadOmitted: 1}
	if want := map[string]int64{"exhausted": 5, "expired": 4}; p.Read != 11 || p.Skipped != 7 || !maps.Equal(p.Reasons, want) || !maps.Equal(p.SkippedBy, wantSkipped) {
		t.Errorf("Progress() = %+v; want Read 11, Skipped 7 %v, Reasons %v (psp's own)", p, wantSkipped, want)
	}
	ack(t, got...)
}

func TestKafkaRangePauseHoldsBackOnlyItsPartitionUntilResumed(t *testing.T) {
	t.Parallel()
	const perPartition = 50
	c := startKfake(t)
	produce(t, kafkaClient(t, c), 0, perPartition, 0, 1)
	r := newKafkaRange(t, c, ReplayOptions{}, 10)

	d := newDeliveries(t)
	resume := pausePartition0(t, r, d)
	paused := d.per[0]
	fetchUntil(t, r, func() bool { return d.per[1] == perPartition }, func(msgs []*shaper.Message) { d.add(msgs, 0) })
	// The reader may have been handing one over as Pause came.
	if n := d.per[0] - paused; n > 1 {
		t.Errorf("partition 0 handed out %d messages while paused; want at most 1", n)
	}
	expectNothing(t, r, 300*time.Millisecond)

	resume()
	rest := readRange(t, r, 10)
	d.add(rest, 0)
	if d.per[0] != perPartition {
		t.Errorf("partition 0 handed out %d messages; want %d after resume", d.per[0], perPartition)
	}
	d.checkOnce(2 * perPartition)
	ack(t, d.all...)
}

func TestKafkaRangeCloseEndsAFetchAndTheReadersMidRange(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	produce(t, kafkaClient(t, c), 0, 20, allPartitions...)
	r := newKafkaRange(t, c, ReplayOptions{}, 4)
	got := fetchN(t, r, 3, 3)
	closeSource(t, r)
	if err := r.Ready(); !errors.Is(err, errKafkaRangeClosed) {
		t.Errorf("Ready() after Close = %v; want %v", err, errKafkaRangeClosed)
	}
	if msgs, err := fetch(r, 10, 5*time.Second); !errors.Is(err, errKafkaRangeClosed) || len(msgs) != 0 {
		t.Errorf("Fetch after Close = %d messages, %v; want none and %v", len(msgs), err, errKafkaRangeClosed)
	}
	ack(t, got...)
	if p := r.Progress(); p.Finished != 3 || p.Exhausted {
		t.Errorf("Progress() after Close = %+v; want Finished 3, not Exhausted", p)
	}
}

func TestKafkaDeadLettersSourceHandsOutTheOriginalAndCommitsPastOneWithoutPayload(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	cfg.DeadLetters, cfg.Pipeline = true, "psp"
	produceRecords(t, cl,
		deadLetterRecord(0, 1, "exhausted", false),
		deadLetterRecord(0, 2, "expired", true),
		&kgo.Record{Partition: 0, Value: []byte("payload-3"), Headers: []kgo.RecordHeader{{Key: "Shaper-Source", Value: []byte("orders/1/3")}, {Key: "Shaper-Pipeline", Value: []byte("psp")}}},
	)
	src, logs := newKafkaSource(t, cfg, 10)
	got := fetchN(t, src, 2, 10)
	if got[0].ID != "id-1" || got[0].Origin != "orders/1/1" || got[0].Attempts != 3 {
		t.Errorf("ID, Origin, Attempts = %q, %q, %d; want id-1, orders/1/1, 3", got[0].ID, got[0].Origin, got[0].Attempts)
	}
	if want := map[string][]string{"X-Trace": {"trace-1"}}; !maps.EqualFunc(got[0].Header, want, slices.Equal) {
		t.Errorf("Header = %v; want %v, no Shaper-* header", got[0].Header, want)
	}
	if got[1].ID != "orders/1/3" || len(got[1].Header) != 0 {
		t.Errorf("ID, Header = %q, %v; want orders/1/3 (its Shaper-Source), no header", got[1].ID, got[1].Header)
	}
	if !testwait.Until(5*time.Second, func() bool { return logs.Count("shaper_source=orders/1/2") == 1 }) {
		t.Errorf("log = %s; want one warning naming shaper_source=orders/1/2", logs.Tail(2000))
	}
	ack(t, got...)
	want := everyPartition(-1)
	want[0] = 3 // the one without payload was finished by the source
	waitCommitted(t, cl, "g", want)
}

// Two pipelines may share a dead-letter topic: a dead-letter source takes
// only its pipeline's own records, and finishes (commits past) those of
// another pipeline or of none, without handing them out, counting each in
// the log.
func TestKafkaDeadLettersSourceCommitsPastOtherPipelinesWithoutHandingThemOut(t *testing.T) {
	t.Parallel()
	_, cl, cfg := startKafkaGroup(t)
	cfg.DeadLetters, cfg.Pipeline = true, "psp"
	produceRecords(t, cl,
		othersRecord(0, 1, "merchantB"),
		deadLetterRecord(0, 2, "exhausted", false),
		othersRecord(0, 3, ""),
		othersRecord(0, 4, "merchantB"),
		deadLetterRecord(0, 5, "expired", false),
	)
	src, logs := newKafkaSource(t, cfg, 10)
	got := fetchN(t, src, 2, 10)
	if g := ids(got); !slices.Equal(g, []string{"id-2", "id-5"}) {
		t.Errorf("handed out %v; want psp's own, id-2 id-5", g)
	}
	expectNothing(t, src, 300*time.Millisecond)
	if !testwait.Until(5*time.Second, func() bool { return logs.Count("other_pipeline_total=3") == 1 }) {
		t.Errorf("log = %s; want each of the 3 others' records counted", logs.Tail(3000))
	}
	if n := logs.Count("shaper_pipeline=merchantB"); n != 2 {
		t.Errorf("log names shaper_pipeline=merchantB %d times; want 2", n)
	}
	ack(t, got...)
	want := everyPartition(-1)
	want[0] = 5 // the others' records were finished by the source
	waitCommitted(t, cl, "g", want)

	cfg.Pipeline = ""
	if _, err := NewKafka(cfg, 10, "shaper-test", nil); err == nil || !strings.Contains(err.Error(), "the pipeline's name is required") {
		t.Errorf("NewKafka(dead_letters, no Pipeline) = %v; want an error: it could tell no dead letter its own", err)
	}
}

// A bound the topic cannot have is refused before anything is read, as a
// BoundError naming its flag: offset:P=N of a partition the topic lacks,
// and a time before 1970 (kafka-go sends -1 and -2 as "latest" and
// "earliest").
func TestKafkaRangeRefusesBoundsTheTopicCannotHave(t *testing.T) {
	t.Parallel()
	c := startKfake(t)
	produce(t, kafkaClient(t, c), 0, 15, allPartitions...)
	brokers := kafkaconn.Config{Brokers: c.ListenAddrs()}
	tests := []struct {
		from, to string
		flag     string
		want     string
	}{
		{"offset:9=1", "", "--from", `offset:9=1: topic "topic" has no partition 9 (its 4 partitions are 0 to 3)`},
		{"", "offset:0=3,7=2", "--to", `offset:7=2: topic "topic" has no partition 7`},
		{"", "1969-12-31T23:59:59.999Z", "--to", "1969-12-31T23:59:59.999Z is outside 1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z"},
		{"2262-04-12T00:00:00Z", "", "--from", "2262-04-12T00:00:00Z is outside"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := NewKafkaRange(ctx, brokers, kafkaTestTopic, 10, bounds(t, tt.from, tt.to), "shaper-test", nil)
		cancel()
		var be *BoundError
		if !errors.As(err, &be) || be.Flag != tt.flag || !strings.Contains(err.Error(), tt.want) {
			if err == nil {
				t.Errorf("NewKafkaRange(--from %q --to %q) read a range of %d; want a BoundError of %s: %q", tt.from, tt.to, r.Progress().Total, tt.flag, tt.want)
				closeSource(t, r)
				continue
			}
			t.Errorf("NewKafkaRange(--from %q --to %q) = %v; want a BoundError of %s: %q", tt.from, tt.to, err, tt.flag, tt.want)
		}
	}
}
