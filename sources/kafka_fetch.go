package sources

import (
	"context"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/shaper"
)

// partitionFetcher reads the partitions a generation assigns to this member,
// each with its own kafka-go Reader, and hands their messages one at a time
// to Fetch through incoming. It passes over the offsets finished before the
// member took a partition (the commit metadata says which; see
// kafkaSession.restore), and records each partition's lag on its claim.
// It decides nothing about commits or ownership: the session does.
type partitionFetcher struct {
	readerCfg kafka.ReaderConfig // a partition reader's, but Partition and QueueCapacity
	queue     int                // messages the partition readers fetch ahead, in all
	health    *kafkaHealth
	session   *kafkaSession     // tells whether a generation still runs
	incoming  chan kafkaFetched // unbuffered: a partition reader hands Fetch one message
}

// kafkaFetched is a message a partition reader hands to Fetch.
type kafkaFetched struct {
	gen   *kafkaGeneration
	claim *kafkaClaim
	msg   kafka.Message
}

// share returns how many messages each of n partition readers fetches
// ahead: its share of the queue, at least one.
func (f *partitionFetcher) share(n int) int {
	return max(f.queue/max(n, 1), 1)
}

// read hands the messages of c's partition, from offset, to Fetch until ctx
// ends with the generation g, but for those finished before (ahead), which
// it skips. It must not return before: the first function of a generation
// to return ends it.
func (f *partitionFetcher) read(ctx context.Context, g *kafkaGeneration, c *kafkaClaim, offset int64, ahead []offsetRange, queue int) {
	rc := f.readerCfg
	rc.Partition, rc.QueueCapacity = c.partition, queue
	r := kafka.NewReader(rc) // rc passed Validate in NewKafka, but for these two
	defer func() {
		_ = r.Close() // waits out the fetch in flight: at most MaxWait
	}()
	if err := r.SetOffset(offset); err != nil {
		f.health.fetchError(fmt.Errorf("partition %d: set offset %d: %w", c.partition, offset, err))
		<-ctx.Done()
		return
	}
	failed := func(err error) { f.health.fetchError(fmt.Errorf("partition %d: %w", c.partition, err)) }
	for {
		m, ok := fetchMessage(ctx, r, failed)
		if !ok {
			return
		}
		for len(ahead) > 0 && ahead[0].to < m.Offset {
			ahead = ahead[1:]
		}
		if len(ahead) > 0 && ahead[0].from <= m.Offset {
			f.skip(g, c, m)
			continue
		}
		if !f.hand(ctx, kafkaFetched{gen: g, claim: c, msg: m}) {
			return // m was not handed out: the partition's next reader reads it again
		}
	}
}

// fetchMessage returns the next message of r. After an error, which it
// passes to failed, it tries again kafkaErrorPause later: a partition reader
// keeps reading through a broker's outage. It returns false when ctx ends.
func fetchMessage(ctx context.Context, r *kafka.Reader, failed func(error)) (kafka.Message, bool) {
	for {
		m, err := r.FetchMessage(ctx)
		if err == nil {
			return m, true
		}
		if ctx.Err() != nil {
			return kafka.Message{}, false
		}
		failed(err)
		if sleepCtx(ctx, kafkaErrorPause) != nil {
			return kafka.Message{}, false
		}
	}
}

// hand hands fm to Fetch, and reports whether it did: not when ctx ends
// first. While fm's claim is paused it waits, without handing fm over, until
// the claim is resumed; a pause that comes while it waits for Fetch stops
// the handover. Meanwhile kafka-go fills the reader's queue (the reader's
// share of kafkaQueueMax) and then stops fetching.
func (f *partitionFetcher) hand(ctx context.Context, fm kafkaFetched) bool {
	return handOver(ctx, f.incoming, fm, fm.claim.pauseState)
}

// skip passes over m, read in generation g, which finished before this
// member took its partition (the commit metadata says so): it is not handed
// out, and only the partition's lag is updated.
func (f *partitionFetcher) skip(g *kafkaGeneration, c *kafkaClaim, m kafka.Message) {
	if f.session.running(g) {
		f.recordLag(c, m)
	}
	f.health.fetched()
}

// recordLag records the lag of c's partition as of m.
func (f *partitionFetcher) recordLag(c *kafkaClaim, m kafka.Message) {
	c.lag.Store(max(m.HighWaterMark-m.Offset-1, 0))
}

// kafkaMessage returns the pipeline's message for m, with receipt r: its ID
// and Origin are "topic/partition/offset", and a nil value is an empty
// payload. The live source and a replay (KafkaRange) both build theirs here.
func kafkaMessage(m kafka.Message, r shaper.Receipt) shaper.Message {
	id := m.Topic + "/" + strconv.Itoa(m.Partition) + "/" + strconv.FormatInt(m.Offset, 10)
	payload := m.Value
	if payload == nil {
		payload = []byte{}
	}
	return shaper.Message{
		ID:      id,
		Origin:  id,
		Key:     m.Key,
		Header:  kafkaHeader(m.Headers),
		Payload: payload,
		Receipt: r,
	}
}

// kafkaHeader returns the record headers hs by name, values in record order,
// or nil when there are none.
func kafkaHeader(hs []kafka.Header) map[string][]string {
	if len(hs) == 0 {
		return nil
	}
	h := make(map[string][]string, len(hs))
	for _, kv := range hs {
		h[kv.Key] = append(h[kv.Key], string(kv.Value))
	}
	return h
}
