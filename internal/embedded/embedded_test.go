package embedded

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestJetStreamPublishReturnsOnceTheStreamHoldsTheBatchAndCloseRemovesTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := StartJetStream(JetStreamOptions{MaxMemory: 64 << 20, MaxStore: 64 << 20, MaxPending: 16})
	if err != nil {
		t.Fatalf("StartJetStream: %v", err)
	}
	defer j.Close()
	if err := j.CreateStream(ctx, "T", "t.>"); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	const n = 100 // more than MaxPending, so Publish goes through back pressure
	if err := j.Publish(ctx, "t.in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) }); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	s, err := j.js.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.State.Msgs != n {
		t.Errorf("stream holds %d messages after Publish; want %d", info.State.Msgs, n)
	}
	msg, err := s.GetMsg(ctx, n)
	if err != nil {
		t.Fatalf("GetMsg(%d): %v", n, err)
	}
	if got, want := string(msg.Data), strconv.Itoa(n-1); got != want {
		t.Errorf("last message = %q; want %q", got, want)
	}
	if err := j.DeleteStream(ctx, "T"); err != nil {
		t.Errorf("DeleteStream: %v", err)
	}
	j.Close()
	if _, err := os.Stat(j.dir); !os.IsNotExist(err) {
		t.Errorf("store %s after Close: %v; want it gone", j.dir, err)
	}
}

func TestKafkaPublishSpreadsTheBatchOverEveryPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := StartKafka(4, "t")
	if err != nil {
		t.Fatalf("StartKafka: %v", err)
	}
	defer k.Close()
	const n = 100
	err = k.Publish(ctx, "t", n, func(i int) ([]byte, []byte) { return []byte(strconv.Itoa(i)), []byte("v" + strconv.Itoa(i)) })
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	defer cl.Close()
	perPartition := map[int32]int{}
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("PollFetches after %d of %d records: %v", got, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			perPartition[r.Partition]++
			if want := "v" + string(r.Key); string(r.Value) != want {
				t.Errorf("record with key %s has value %q; want %q", r.Key, r.Value, want)
			}
		})
	}
	for p := range int32(4) {
		if perPartition[p] != n/4 {
			t.Errorf("partition %d holds %d records; want %d (round robin)", p, perPartition[p], n/4)
		}
	}
}
