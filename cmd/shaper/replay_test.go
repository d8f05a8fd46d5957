package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// The replay tests run `shaper replay` as an operator does, against a real
// broker (kfake, an embedded nats-server) and a real HTTP sink, once per
// broker. A message's body is {"n":i}; the sink sees its Idempotency-Key.

// replayLog is what a replay reads, on one broker.
type replayLog interface {
	// source and deadLetter are the pipeline's source: and dead_letter:
	// blocks.
	source() string
	deadLetter() string
	// publish writes n messages {"n":i} to the source, in bands of
	// len(bands), and returns the times that cut between bands
	// (len(bands)-1 of them: each after every message of the bands before
	// it, at or before every message of the bands after it) and each
	// message's id.
	publish(t *testing.T, bands ...int) (cuts []time.Time, ids []string)
	// publishDeadLetters writes dead letters to the dead-letter target:
	// per reason, that many, each with its original id (Shaper-Id on the
	// even ones, the broker's own form on the odd ones), and returns the
	// original ids per reason.
	publishDeadLetters(t *testing.T, counts map[string]int) map[string][]string
	// publishOthersDeadLetters writes n dead letters of pipeline (its
	// Shaper-Pipeline; "": none) to the dead-letter target, each with the
	// payload {"secret-for":"<pipeline>"}.
	publishOthersDeadLetters(t *testing.T, pipeline string, n int)
	// newDeadLetters returns the headers of the dead letters the replay
	// wrote (those publishDeadLetters wrote have Shaper-Error status 503).
	newDeadLetters(t *testing.T) []map[string]string
	// untouched fails the test if the live pipeline's position moved:
	// Kafka: anything committed for its group; JetStream: its durable
	// consumer acked or was given anything.
	untouched(t *testing.T)
}

type kafkaLog struct {
	k *kafkatest.Cluster
}

func newKafkaLog(t *testing.T) replayLog {
	return &kafkaLog{k: kafkatest.Start(t, kfake.SeedTopics(4, "callbacks", "callbacks-dlq"))}
}

func (l *kafkaLog) source() string { return kafkatest.SourceYAML(l.k.Addr, "callbacks", "shaper-psp") }
func (l *kafkaLog) deadLetter() string {
	return fmt.Sprintf(`{kafka: {brokers: ["%s"], topic: callbacks-dlq}}`, l.k.Addr)
}

func (l *kafkaLog) publish(t *testing.T, bands ...int) ([]time.Time, []string) {
	base := time.Now().Add(-time.Duration(len(bands)) * time.Hour).Truncate(time.Second)
	var recs []*kgo.Record
	var cuts []time.Time
	n := 0
	for b, size := range bands {
		at := base.Add(time.Duration(b) * time.Hour)
		if b > 0 {
			cuts = append(cuts, at.Add(-30*time.Minute))
		}
		for range size {
			recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(n)), Value: fmt.Appendf(nil, `{"n":%d}`, n), Timestamp: at.Add(time.Duration(n) * time.Millisecond)})
			n++
		}
	}
	l.k.Produce("callbacks", recs)
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = fmt.Sprintf("callbacks/%d/%d", r.Partition, r.Offset)
	}
	return cuts, ids
}

func (l *kafkaLog) publishDeadLetters(t *testing.T, counts map[string]int) map[string][]string {
	var recs []*kgo.Record
	ids := map[string][]string{}
	n := 0
	for _, reason := range slices.Sorted(maps.Keys(counts)) {
		for range counts[reason] {
			id := fmt.Sprintf("callbacks/%d/%d", n%4, 1000+n)
			h := []kgo.RecordHeader{
				{Key: "Shaper-Reason", Value: []byte(reason)}, {Key: "Shaper-Error", Value: []byte("status 503")},
				{Key: "Shaper-Attempts", Value: []byte("5")}, {Key: "Shaper-Pipeline", Value: []byte("psp")},
				{Key: "Shaper-Source", Value: []byte(id)}, {Key: "Merchant", Value: []byte("m1")},
			}
			if n%2 == 0 {
				h = append(h, kgo.RecordHeader{Key: "Shaper-Id", Value: []byte(id)})
			}
			recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"n":%d}`, n), Headers: h})
			ids[reason] = append(ids[reason], id)
			n++
		}
	}
	l.k.Produce("callbacks-dlq", recs)
	return ids
}

func (l *kafkaLog) publishOthersDeadLetters(t *testing.T, pipeline string, n int) {
	var recs []*kgo.Record
	for i := range n {
		h := []kgo.RecordHeader{
			{Key: "Shaper-Reason", Value: []byte("exhausted")}, {Key: "Shaper-Error", Value: []byte("status 503")},
			{Key: "Shaper-Source", Value: fmt.Appendf(nil, "others/0/%d", i)}, {Key: "Shaper-Id", Value: fmt.Appendf(nil, "%s-%d", pipeline, i)},
		}
		if pipeline != "" {
			h = append(h, kgo.RecordHeader{Key: "Shaper-Pipeline", Value: []byte(pipeline)})
		}
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"secret-for":%q}`, pipeline), Headers: h})
	}
	l.k.Produce("callbacks-dlq", recs)
}

func (l *kafkaLog) newDeadLetters(t *testing.T) []map[string]string {
	c := l.k.Client(kgo.ConsumeTopics("callbacks-dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer c.Close()
	adm := kadm.NewClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, "callbacks-dlq")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	ends.Each(func(o kadm.ListedOffset) { total += int(o.Offset) })
	var out []map[string]string
	for len(out) < total {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d dead letters", len(out), total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			out = append(out, h)
		})
	}
	return written(out)
}

// written returns the dead letters of all that the replay wrote.
func written(all []map[string]string) []map[string]string {
	var out []map[string]string
	for _, h := range all {
		if h["Shaper-Error"] != "status 503" {
			out = append(out, h)
		}
	}
	return out
}

func (l *kafkaLog) untouched(t *testing.T) {
	c := l.k.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(c).ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 0 {
		t.Errorf("groups %v exist; a replay joins none", groups.Groups())
	}
	offsets, err := kadm.NewClient(c).FetchOffsets(ctx, "shaper-psp")
	if errors.Is(err, kerr.GroupIDNotFound) {
		return // never joined, nothing committed
	}
	if err != nil {
		t.Fatalf("fetch the group's offsets: %v", err)
	}
	offsets.Each(func(o kadm.OffsetResponse) {
		t.Errorf("the live group shaper-psp has a committed offset %d for %s/%d; a replay must commit nothing", o.At, o.Topic, o.Partition)
	})
}

type jetStreamLog struct {
	url string
}

func newJetStreamLog(t *testing.T) replayLog {
	url := natstest.Start(t).ClientURL()
	natstest.Stream(t, url, "CALLBACKS", "callbacks.>")
	natstest.Stream(t, url, "DLQ", "dlq.>")
	l := &jetStreamLog{url: url}
	// The live pipeline's durable consumer exists: the replay must leave
	// it as it is.
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		if _, err := js.CreateConsumer(ctx, "CALLBACKS", jetstream.ConsumerConfig{Durable: "shaper-psp", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "callbacks.psp"}); err != nil {
			t.Fatal(err)
		}
	})
	return l
}

func (l *jetStreamLog) js(t *testing.T, f func(context.Context, jetstream.JetStream)) {
	t.Helper()
	nc, err := nats.Connect(l.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f(ctx, js)
}

func (l *jetStreamLog) source() string { return natsSource(l.url) }
func (l *jetStreamLog) deadLetter() string {
	return fmt.Sprintf(`{nats: {url: "%s", subject: dlq.psp}}`, l.url)
}

func (l *jetStreamLog) publish(t *testing.T, bands ...int) ([]time.Time, []string) {
	var cuts []time.Time
	var ids []string
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		stream, err := js.Stream(ctx, "CALLBACKS")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for b, size := range bands {
			for i := range size {
				ack, err := js.Publish(ctx, "callbacks.psp", fmt.Appendf(nil, `{"n":%d}`, n))
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, fmt.Sprintf("CALLBACKS/%d", ack.Sequence))
				n++
				if b > 0 && i == 0 {
					// The band's first stored time: the one before
					// was stored earlier, the rest of it later.
					m, err := stream.GetMsg(ctx, ack.Sequence)
					if err != nil {
						t.Fatal(err)
					}
					cuts = append(cuts, m.Time)
				}
			}
		}
	})
	return cuts, ids
}

func (l *jetStreamLog) publishDeadLetters(t *testing.T, counts map[string]int) map[string][]string {
	ids := map[string][]string{}
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		n := 0
		for _, reason := range slices.Sorted(maps.Keys(counts)) {
			for range counts[reason] {
				src := fmt.Sprintf("CALLBACKS/%d", 1000+n)
				h := nats.Header{"Shaper-Reason": {reason}, "Shaper-Error": {"status 503"}, "Shaper-Attempts": {"5"},
					"Shaper-Pipeline": {"psp"}, "Shaper-Source": {src}, "Merchant": {"m1"}}
				id := src
				if n%2 == 1 { // the original carried its own Nats-Msg-Id
					id = fmt.Sprintf("pay-%d", n)
					h["Nats-Msg-Id"] = []string{id}
				} else {
					h["Shaper-Id"] = []string{id}
				}
				if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq.psp", Header: h, Data: fmt.Appendf(nil, `{"n":%d}`, n)}); err != nil {
					t.Fatal(err)
				}
				ids[reason] = append(ids[reason], id)
				n++
			}
		}
	})
	return ids
}

func (l *jetStreamLog) publishOthersDeadLetters(t *testing.T, pipeline string, n int) {
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		for i := range n {
			h := nats.Header{"Shaper-Reason": {"exhausted"}, "Shaper-Error": {"status 503"},
				"Shaper-Source": {fmt.Sprintf("OTHERS/%d", i)}, "Shaper-Id": {fmt.Sprintf("%s-%d", pipeline, i)}}
			if pipeline != "" {
				h["Shaper-Pipeline"] = []string{pipeline}
			}
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "dlq.psp", Header: h, Data: fmt.Appendf(nil, `{"secret-for":%q}`, pipeline)}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func (l *jetStreamLog) newDeadLetters(t *testing.T) []map[string]string {
	var out []map[string]string
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DLQ")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			h := map[string]string{}
			for k := range m.Header {
				h[k] = m.Header.Get(k)
			}
			out = append(out, h)
		}
	})
	return written(out)
}

func (l *jetStreamLog) untouched(t *testing.T) {
	l.js(t, func(ctx context.Context, js jetstream.JetStream) {
		c, err := js.Consumer(ctx, "CALLBACKS", "shaper-psp")
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Stream != 0 || info.AckFloor.Stream != 0 {
			t.Errorf("the live durable consumer was moved: delivered %d, ack floor %d; a replay uses an ephemeral consumer",
				info.Delivered.Stream, info.AckFloor.Stream)
		}
		st, err := js.Stream(ctx, "CALLBACKS")
		if err != nil {
			t.Fatal(err)
		}
		names := st.ConsumerNames(ctx)
		var left []string
		for n := range names.Name() {
			if n != "shaper-psp" {
				left = append(left, n)
			}
		}
		if len(left) > 0 {
			t.Errorf("consumers %v left on the stream after the replay", left)
		}
	})
}

// eachLog runs test once per broker.
func eachLog(t *testing.T, test func(t *testing.T, l replayLog)) {
	t.Run("kafka", func(t *testing.T) { test(t, newKafkaLog(t)) })
	t.Run("jetstream", func(t *testing.T) { test(t, newJetStreamLog(t)) })
}

// replayConfig writes the config of pipeline psp from l to sink.
func replayConfig(t *testing.T, l replayLog, sink *sinktest.Sink, rate string) string {
	return childtest.WriteConfig(t, childtest.Pipeline{
		Drain:      300 * time.Millisecond, // an interrupted replay nacks what it holds past this
		Source:     l.source(),
		Bucket:     "{capacity: 50, max_queue_time: 1m}",
		Rate:       rate,
		Sink:       fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, retry: {max_attempts: 2, initial_backoff: 10ms, max_backoff: 50ms}}}`, sink.URL),
		DeadLetter: l.deadLetter(),
	}.YAML())
}

// replayOut is what a finished replay wrote: its progress lines and its
// summary, each parsed from one line of stdout.
type replayOut struct {
	progress []replayProgress
	summary  replaySummary
}

// runReplay runs shaper replay with args to its end, and returns its exit
// code and what it wrote. Every line of its stdout must be JSON.
func runReplay(t *testing.T, args ...string) (int, replayOut) {
	t.Helper()
	child := startShaper(t, nil, append([]string{"replay"}, args...)...)
	code := child.Wait(2 * time.Minute)
	return code, parseReplayOut(t, child.Stdout.String())
}

func parseReplayOut(t *testing.T, stdout string) replayOut {
	t.Helper()
	var out replayOut
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var line struct {
			Progress *replayProgress `json:"progress"`
			Summary  *replaySummary  `json:"summary"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", sc.Text(), err)
		}
		switch {
		case line.Progress != nil:
			out.progress = append(out.progress, *line.Progress)
		case line.Summary != nil:
			out.summary = *line.Summary
		default:
			t.Fatalf("stdout line %q is neither progress nor summary", sc.Text())
		}
	}
	return out
}

// bodiesOf returns the n of each body the sink answered 2xx, and the
// Idempotency-Keys it saw.
func bodiesOf(t *testing.T, sink *sinktest.Sink) (ns []int, keys []string) {
	for _, r := range sink.Requests() {
		if r.Status/100 != 2 {
			continue
		}
		var b struct{ N int }
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("body %q: %v", r.Body, err)
		}
		ns = append(ns, b.N)
		keys = append(keys, r.Key)
	}
	slices.Sort(ns)
	return ns, keys
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// 500 messages at --rate 200: the replay ends by itself in 2.5 s ± 1 s,
// exit 0, each delivered once, the live position untouched, progress lines
// JSON off a terminal.
func TestReplayOfTheWholeLogAtARateEndsByItselfWithEachDeliveredOnce(t *testing.T) {
	eachLog(t, func(t *testing.T, l replayLog) {
		const n = 500
		_, ids := l.publish(t, n)
		sink := sinktest.Start(t, sinktest.OK)
		config := replayConfig(t, l, sink, "{limit: 20}")
		code, out := runReplay(t, "--config", config, "--pipeline", "psp", "--rate", "200", "--progress-every", "500ms")
		if code != exitOK {
			t.Fatalf("exit code %d; want 0; summary %+v", code, out.summary)
		}
		s := out.summary
		t.Logf("summary %+v; %d progress lines", s, len(out.progress))
		if !s.Complete || s.Total != n || s.Delivered != n || s.Resume != "" {
			t.Errorf("summary %+v; want complete, %d in total and delivered, no resume", s, n)
		}
		if s.ElapsedSeconds < 1.5 || s.ElapsedSeconds > 3.5 {
			t.Errorf("took %.2fs; want 2.5s ± 1s (500 at 200/s)", s.ElapsedSeconds)
		}
		ns, keys := bodiesOf(t, sink)
		if !slices.Equal(ns, seq(0, n)) {
			t.Errorf("delivered %d bodies; want each of the %d once", len(ns), n)
		}
		if dup := sink.Duplicates(); len(dup) > 0 {
			t.Errorf("sent more than once: %v", dup)
		}
		slices.Sort(keys)
		slices.Sort(ids)
		if !slices.Equal(keys, ids) {
			t.Errorf("Idempotency-Keys are not the messages' ids (first %v, want %v)", keys[:3], ids[:3])
		}
		// Smooth: at 200/s no second holds more than 200 requests, give
		// or take what the loopback's latency bunches.
		arrivals := sinktest.Arrivals(sink.Requests())
		peak := sinktest.MaxInWindow(arrivals, time.Second)
		t.Logf("requests over %v, at most %d in any 1 s", arrivals[len(arrivals)-1].Sub(arrivals[0]).Round(time.Millisecond), peak)
		if peak > 210 {
			t.Errorf("%d requests in one second at --rate 200; want at most 210", peak)
		}
		if len(out.progress) < 2 {
			t.Errorf("%d progress lines in %.1fs at one per 500ms; want several", len(out.progress), s.ElapsedSeconds)
		}
		for _, p := range out.progress {
			if p.Total != n || p.Done > n || p.Pipeline != "psp" {
				t.Errorf("progress line %+v; want total %d, done <= total", p, n)
			}
		}
		l.untouched(t)
	})
}

// Three bands of stored times; --from and --to cutting between them
// select exactly the middle band.
func TestReplayOfATimeRangeSelectsExactlyTheMessagesInIt(t *testing.T) {
	eachLog(t, func(t *testing.T, l replayLog) {
		cuts, _ := l.publish(t, 30, 40, 30)
		sink := sinktest.Start(t, sinktest.OK)
		config := replayConfig(t, l, sink, "{limit: 500}")
		code, out := runReplay(t, "--config", config, "--pipeline", "psp",
			"--from", cuts[0].UTC().Format(time.RFC3339Nano), "--to", cuts[1].UTC().Format(time.RFC3339Nano))
		if code != exitOK {
			t.Fatalf("exit code %d; want 0; summary %+v", code, out.summary)
		}
		if ns, _ := bodiesOf(t, sink); !slices.Equal(ns, seq(30, 70)) {
			t.Errorf("delivered %v; want exactly the middle band, 30..69", ns)
		}
		if s := out.summary; s.Total != 40 || s.Delivered != 40 {
			t.Errorf("summary %+v; want 40 in the range, 40 delivered", s)
		}
	})
}

// 30 dead letters, 20 exhausted and 10 expired: --reason exhausted
// delivers exactly the 20, each with its original Idempotency-Key and no
// Shaper-* header. One that fails again is dead-lettered again, its
// attempts counting on from the original's and its source and id kept.
func TestReplayOfDeadLettersOfOneReasonSendsTheOriginalIdsAndNoShaperHeaders(t *testing.T) {
	eachLog(t, func(t *testing.T, l replayLog) {
		ids := l.publishDeadLetters(t, map[string]int{"exhausted": 20, "expired": 10})
		// The receiver refuses one of them for good (400).
		refused := ids["exhausted"][3]
		sink := sinktest.Start(t, func(r *http.Request, _ int) sinktest.Action {
			if r.Header.Get("Idempotency-Key") == refused {
				return sinktest.Action{Status: http.StatusBadRequest, Body: "unknown payment"}
			}
			return sinktest.Action{}
		})
		config := replayConfig(t, l, sink, "{limit: 200}")

		dry := startShaper(t, nil, "replay", "--config", config, "--pipeline", "psp", "--dead-letters", "--reason", "exhausted", "--dry-run")
		if code := dry.Wait(time.Minute); code != exitOK {
			t.Fatalf("--dry-run exit code %d; want 0", code)
		}
		var counted struct {
			DryRun struct {
				Total, Selected, Skipped int
				Reasons                  map[string]int
			} `json:"dry_run"`
		}
		if err := json.Unmarshal([]byte(dry.Stdout.String()), &counted); err != nil {
			t.Fatalf("--dry-run wrote %q: %v", dry.Stdout.String(), err)
		}
		if c := counted.DryRun; c.Total != 30 || c.Selected != 20 || c.Skipped != 10 || c.Reasons["exhausted"] != 20 || c.Reasons["expired"] != 10 {
			t.Errorf("--dry-run counted %+v; want 30 in all, 20 exhausted selected, 10 expired", c)
		}
		if n := sink.RequestCount(); n != 0 {
			t.Fatalf("--dry-run sent %d requests; want none", n)
		}

		code, out := runReplay(t, "--config", config, "--pipeline", "psp", "--dead-letters", "--reason", "exhausted")
		if code != exitOK {
			t.Fatalf("exit code %d; want 0 (a dead letter is a final outcome); summary %+v", code, out.summary)
		}
		if s := out.summary; s.Total != 30 || s.Skipped != 10 || s.Delivered != 19 || s.DeadLettered != 1 {
			t.Errorf("summary %+v; want 30 read, 10 passed over, 19 delivered, 1 dead-lettered again", s)
		}
		var keys []string
		for _, r := range sink.Requests() {
			keys = append(keys, r.Key)
			for name := range r.Header {
				if strings.HasPrefix(strings.ToLower(name), "shaper-") || strings.EqualFold(name, "Nats-Msg-Id") {
					t.Errorf("request %s carries header %s: a replayed dead letter is sent without the dead letter's headers", r.Key, name)
				}
			}
		}
		slices.Sort(keys)
		want := slices.Clone(ids["exhausted"])
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Errorf("Idempotency-Keys %v; want the 20 exhausted originals %v, each once", keys, want)
		}
		again := l.newDeadLetters(t)
		if len(again) != 1 {
			t.Fatalf("%d new dead letters; want 1: %v", len(again), again)
		}
		h := again[0]
		if h["Shaper-Reason"] != "rejected" || h["Shaper-Attempts"] != "6" || h["Shaper-Id"] != refused || !strings.HasPrefix(h["Shaper-Source"], "CALLBACKS/") && !strings.HasPrefix(h["Shaper-Source"], "callbacks/") {
			t.Errorf("the new dead letter's headers %v; want rejected, attempts 6 (5 + 1), the original id %s and source", h, refused)
		}
	})
}

// Two pipelines may share a dead-letter target. --dead-letters takes only
// the records whose Shaper-Pipeline is the pipeline's own name: those of
// another pipeline, and those without the header (owner unknown), are
// never sent, and are counted as skipped, other_pipeline, by --dry-run and
// in the summary.
func TestReplayOfDeadLettersSendsOnlyThePipelinesOwn(t *testing.T) {
	eachLog(t, func(t *testing.T, l replayLog) {
		ids := l.publishDeadLetters(t, map[string]int{"exhausted": 4})
		l.publishOthersDeadLetters(t, "merchantB", 3)
		l.publishOthersDeadLetters(t, "", 1)
		sink := sinktest.Start(t, sinktest.OK)
		config := replayConfig(t, l, sink, "{limit: 200}")

		dry := startShaper(t, nil, "replay", "--config", config, "--pipeline", "psp", "--dead-letters", "--dry-run")
		if code := dry.Wait(time.Minute); code != exitOK {
			t.Fatalf("--dry-run exit code %d; want 0", code)
		}
		var counted struct {
			DryRun struct {
				Total, Selected, Skipped int
				SkippedBy                map[string]int `json:"skipped_by"`
			} `json:"dry_run"`
		}
		if err := json.Unmarshal([]byte(dry.Stdout.String()), &counted); err != nil {
			t.Fatalf("--dry-run wrote %q: %v", dry.Stdout.String(), err)
		}
		if c := counted.DryRun; c.Total != 8 || c.Selected != 4 || c.Skipped != 4 || c.SkippedBy["other_pipeline"] != 4 {
			t.Errorf("--dry-run counted %+v; want 8 in all, psp's 4 selected, 4 skipped as other_pipeline", c)
		}

		code, out := runReplay(t, "--config", config, "--pipeline", "psp", "--dead-letters")
		if code != exitOK {
			t.Fatalf("exit code %d; want 0; summary %+v", code, out.summary)
		}
		var keys []string
		for _, r := range sink.Requests() {
			keys = append(keys, r.Key)
			if bytes.Contains(r.Body, []byte("secret-for")) {
				t.Errorf("psp's receiver got %s (Idempotency-Key %s), another pipeline's dead letter", r.Body, r.Key)
			}
		}
		slices.Sort(keys)
		want := slices.Sorted(slices.Values(ids["exhausted"]))
		if !slices.Equal(keys, want) {
			t.Errorf("Idempotency-Keys %v; want psp's own %v, each once", keys, want)
		}
		if s := out.summary; s.Total != 8 || s.Delivered != 4 || s.Skipped != 4 || s.SkippedBy["other_pipeline"] != 4 {
			t.Errorf("summary %+v; want 8 read, 4 delivered, 4 skipped as other_pipeline", s)
		}
	})
}

// A SIGTERM mid-replay drains as run does, exits 1 and prints the command
// that goes on; that command delivers the rest, with no duplicates beyond
// what was in flight (max_in_flight 4).
func TestAnInterruptedReplayResumesWithThePrintedCommand(t *testing.T) {
	eachLog(t, func(t *testing.T, l replayLog) {
		const n = 300
		l.publish(t, n)
		sink := sinktest.Start(t, sinktest.OK)
		config := replayConfig(t, l, sink, "{limit: 100}")
		child := startShaper(t, nil, "replay", "--config", config, "--pipeline", "psp")
		testwait.For(t, 30*time.Second, "60 deliveries", func() bool { return sink.DeliveredCount() >= 60 })
		child.Signal(syscall.SIGTERM)
		if code := child.Wait(30 * time.Second); code != exitRuntime {
			t.Errorf("exit code after SIGTERM = %d; want 1 (the range is not finished)", code)
		}
		out := parseReplayOut(t, child.Stdout.String())
		first := sink.DeliveredCount()
		t.Logf("interrupted after %d of %d; resume: %s", first, n, out.summary.Resume)
		if !out.summary.Interrupted || out.summary.Resume == "" {
			t.Fatalf("summary %+v; want interrupted, with the resume command", out.summary)
		}
		resume := strings.Fields(out.summary.Resume)
		if resume[0] != "shaper" || resume[1] != "replay" {
			t.Fatalf("resume %q is not a shaper replay command", out.summary.Resume)
		}
		code, rest := runReplay(t, resume[2:]...)
		if code != exitOK {
			t.Fatalf("the resumed replay's exit code %d; want 0; summary %+v", code, rest.summary)
		}
		ns, _ := bodiesOf(t, sink)
		got := slices.Compact(slices.Clone(ns))
		if !slices.Equal(got, seq(0, n)) {
			t.Errorf("after the resume %d distinct messages delivered; want all %d", len(got), n)
		}
		if dup := len(ns) - len(got); dup > 4 {
			t.Errorf("%d delivered twice; want at most the 4 in flight", dup)
		}
	})
}

// Usage errors exit 2 and say what is wrong.
func TestReplayUsageErrorsExit2NamingTheProblem(t *testing.T) {
	l := &kafkaLog{k: &kafkatest.Cluster{Addr: "127.0.0.1:1"}}
	sink := &sinktest.Sink{URL: "http://127.0.0.1:1/notify"}
	config := replayConfig(t, l, sink, "{limit: 10}")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pipeline", "psp"}, "--config is required"},
		{[]string{"--config", config}, "--pipeline is required"},
		{[]string{"--config", config, "--pipeline", "nope"}, `"nope": no such pipeline`},
		{[]string{"--config", config, "--pipeline", "psp", "--from", "yesterday"}, `--from "yesterday": want an RFC 3339 time`},
		{[]string{"--config", config, "--pipeline", "psp", "--from", "seq:4"}, "seq:N is for JetStream"},
		{[]string{"--config", config, "--pipeline", "psp", "--reason", "exhausted"}, "--reason selects dead letters"},
		{[]string{"--config", config, "--pipeline", "psp", "--dead-letters", "--reason", "lost"}, `want expired, rejected, exhausted or malformed, got "lost"`},
		{[]string{"--config", config, "--pipeline", "psp", "--rate", "-3"}, "--rate: must be > 0, got -3"},
		{[]string{"--config", config, "--pipeline", "psp", "--rate", "0"}, "--rate: must be > 0, got 0"},
		{[]string{"--config", config, "--pipeline", "psp", "--from", "2502-11-30T14:00:00Z"}, "--from: 2502-11-30T14:00:00Z is more than a day after now"},
		{[]string{"--config", config, "--pipeline", "psp", "--from", "1677-09-20T00:00:00Z"}, "--from: 1677-09-20T00:00:00Z is before 1970-01-01T00:00:00Z"},
		{[]string{"--config", config, "--pipeline", "psp", "--to", "1969-12-31T23:59:59.999Z"}, "--to: 1969-12-31T23:59:59.999Z is before 1970-01-01T00:00:00Z"},
		{[]string{"--config", config, "--pipeline", "psp", "--from", "2026-11-30T16:00:00Z", "--to", "2026-11-30T14:00:00Z"}, "is not after --from"},
	} {
		code, _, stderr := runMain(t, append([]string{"replay"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("replay %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// On a terminal the replay draws a live bar and ends with a summary in
// words. The terminal is a pseudo-terminal the test reads.
func TestReplayOnATerminalDrawsABarAndSaysHowItWent(t *testing.T) {
	l := newJetStreamLog(t)
	l.publish(t, 100)
	sink := sinktest.Start(t, sinktest.OK)
	config := replayConfig(t, l, sink, "{limit: 100}")
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	cmd := exec.Command(os.Args[0], "replay", "--config", config, "--pipeline", "psp")
	cmd.Env = append(os.Environ(), "SHAPER_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = tty, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child has its own
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, ptmx) // ends with an error once the child's side is closed
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("replay on a terminal: %v\n%s", err, stderr.String())
	}
	<-read
	out := screen.String()
	t.Logf("the terminal showed (last 400 bytes): %q", out[max(len(out)-400, 0):])
	for _, want := range []string{"100/100", "msg/s", "100 delivered", "\nreplay psp complete: 100 in the range, 100 delivered"} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal did not show %q", want)
		}
	}
	if strings.Contains(out, `{"progress"`) || strings.Contains(out, `{"summary"`) {
		t.Errorf("JSON lines on a terminal; want the bar and words")
	}
}

// --from and --to name a time from 1970-01-01T00:00:00Z to a day after
// now, now as the replay's clock gives it.
func TestReplayTimesMustLieBetween1970AndADayAfterNow(t *testing.T) {
	l := &kafkaLog{k: &kafkatest.Cluster{Addr: "127.0.0.1:1"}}
	config := replayConfig(t, l, &sinktest.Sink{URL: "http://127.0.0.1:1/notify"}, "{limit: 10}")
	now := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		from, to string
		want     string // "": accepted
	}{
		{give(now.Add(23 * time.Hour)), "", ""},
		{"1970-01-01T00:00:00Z", "", ""},
		{"", give(now.Add(24 * time.Hour)), ""},
		{give(now.Add(25 * time.Hour)), "", "--from: 2030-06-02T13:00:00Z is more than a day after now (2030-06-01T12:00:00Z)"},
		{"", give(now.Add(24*time.Hour + time.Millisecond)), "--to: 2030-06-02T12:00:00.001Z is more than a day after now"},
		{"2502-11-30T14:00:00Z", "", "--from: 2502-11-30T14:00:00Z is more than a day after now"},
		{"2262-04-12T00:00:00Z", "", "--from: 2262-04-12T00:00:00Z is more than a day after now"},
		{"1677-09-20T00:00:00Z", "seq:13845", "--from: 1677-09-20T00:00:00Z is before 1970-01-01T00:00:00Z"},
		{"", "1969-12-31T23:59:59.999Z", "--to: 1969-12-31T23:59:59.999Z is before 1970-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		a := replayArgs{config: config, pipeline: "psp", from: tt.from, to: tt.to, progressEvery: time.Second}
		_, _, _, err := a.check(now)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("check(--from %q --to %q) = %v; want nil", tt.from, tt.to, err)
		case tt.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(fmt.Sprint(err), tt.want)):
			t.Errorf("check(--from %q --to %q) = %v; want a usage error with %q", tt.from, tt.to, err, tt.want)
		}
	}
}

func give(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// offset:P=N naming a partition the topic does not have is a usage error
// (exit 2) that names the flag and the partition, and nothing is sent.
func TestReplayFromAPartitionTheTopicLacksExits2(t *testing.T) {
	l := newKafkaLog(t) // 4 partitions
	l.publish(t, 20)
	sink := sinktest.Start(t, sinktest.OK)
	config := replayConfig(t, l, sink, "{limit: 500}")
	for _, flag := range []string{"--from", "--to"} {
		child := startShaper(t, nil, "replay", "--config", config, "--pipeline", "psp", flag, "offset:1=0,9=1")
		code := child.Wait(time.Minute)
		stderr := child.Stderr.String()
		if want := flag + `: offset:9=1: topic "callbacks" has no partition 9`; code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("replay %s offset:1=0,9=1: exit %d, stderr %q; want 2 and %q", flag, code, stderr, want)
		}
	}
	if n := sink.RequestCount(); n != 0 {
		t.Errorf("%d requests sent; want none", n)
	}
}
