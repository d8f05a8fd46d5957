package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
)

// States of a kafkaClaim.
const (
	claimOwned     = iota // a running generation assigns the partition to this member
	claimSuspended        // that generation ended; the next one is not known yet
	claimRevoked          // a later generation did not assign it to this member again
)

// kafkaClaim is this member's hold on one partition: from the generation
// that assigns it, through the generations right after it that assign it
// again, to the first one that does not.
type kafkaClaim struct {
	partition int
	// state is one of claimOwned (the zero value), claimSuspended and
	// claimRevoked, which is final. It is written under Kafka.mu and read
	// without it by Revoked.
	state atomic.Int32
	// outstanding counts the claim's messages handed out by Fetch and not
	// yet settled. It is guarded by Kafka.mu.
	outstanding int
}

// kafkaGeneration is one generation of the group as this member runs it.
type kafkaGeneration struct {
	gen    *kafka.Generation
	claims map[int]*kafkaClaim    // by partition: those assigned to this member
	starts map[int]partitionStart // by partition: where its reader starts
}

// partitionStart is where a partition reader starts.
type partitionStart struct {
	offset int64
	// ahead are offsets past offset finished before, which the reader
	// skips: those of the committed metadata not read yet, when the member
	// keeps the partition.
	ahead []offsetRange
	// restore is set when the member takes the partition from the group:
	// the reader reads ahead from the committed metadata first.
	restore bool
}

// kafkaFetched is a message a partition reader hands to Fetch.
type kafkaFetched struct {
	gen   *kafkaGeneration
	claim *kafkaClaim
	msg   kafka.Message
}

// consume runs the member's generations one after the other until the group
// is closed. kafka-go returns the next generation only after every function
// started in the previous one has returned.
func (s *Kafka) consume(group *kafka.ConsumerGroup) {
	for {
		gen, err := group.Next(context.Background())
		switch {
		case errors.Is(err, kafka.ErrGroupClosed):
			return
		case err != nil:
			// The group has logged it (health.readerError), and backs off
			// before it tries again.
			continue
		}
		s.begin(gen)
	}
}

// begin settles the claims of the last generation against gen's
// assignments, and starts a reader for each partition gen assigns to this
// member and a function that commits for gen.
//
// A claim is kept when gen comes right after the generation it was owned in
// (same member, same or next generation ID: no other member can have owned
// the partition in between) and the group's committed offset has not passed
// its mark; its reader resumes after the last offset handed out. Any other
// claim is revoked, and a partition without a kept claim starts at the
// offset kafka-go puts in the assignment: the committed offset, or
// StartOffset (FirstOffset or LastOffset) when the group has none; its
// reader first reads the committed metadata, and skips the offsets it
// records as finished (see restore).
func (s *Kafka) begin(gen *kafka.Generation) {
	assigned := make(map[int]int64)
	for _, a := range gen.Assignments[s.cfg.Topic] {
		assigned[a.ID] = a.Offset
	}
	g := &kafkaGeneration{
		gen:    gen,
		claims: make(map[int]*kafkaClaim, len(assigned)),
		starts: make(map[int]partitionStart, len(assigned)),
	}
	var kept, revoked []int

	s.mu.Lock()
	if s.gen != nil {
		// Its end went unnoticed: kafka-go runs a function started on an
		// ended generation without waiting for it.
		s.suspendLocked(s.gen)
	}
	following := s.memberID == gen.MemberID && (gen.ID == s.genID || gen.ID == s.genID+1)
	s.memberID, s.genID = gen.MemberID, gen.ID
	for p, c := range s.claims {
		offset, ok := assigned[p]
		mark, fetched := s.marks.markOf(p)
		if ok && following && (!fetched || offset < 0 || offset <= mark) {
			c.state.Store(claimOwned)
			start := partitionStart{offset: offset, restore: !fetched}
			if next, ok := s.marks.next(p); ok {
				start.offset, start.ahead = next, s.marks.finishedAhead(p)
			}
			g.claims[p], g.starts[p] = c, start
			kept = append(kept, p)
			continue
		}
		c.state.Store(claimRevoked)
		delete(s.claims, p)
		s.marks.drop(p)
		delete(s.lag, p)
		revoked = append(revoked, p)
	}
	for p, offset := range assigned {
		if g.claims[p] == nil {
			c := &kafkaClaim{partition: p}
			s.claims[p], g.claims[p], g.starts[p] = c, c, partitionStart{offset: offset, restore: true}
		}
	}
	if len(revoked) > 0 {
		s.delayed = s.delayed.keep(func(x delayedDelivery) bool { return x.d.claim.state.Load() != claimRevoked })
	}
	s.gen = g
	s.mu.Unlock()
	notify(s.fetchWake) // nacked messages of kept partitions may be due

	partitions := make([]int, 0, len(assigned))
	for p := range assigned {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)
	slices.Sort(kept)
	slices.Sort(revoked)
	s.log.Info("kafka: partitions assigned", "generation", gen.ID, "partitions", partitions, "kept", kept, "revoked", revoked)

	queue := max(s.queue/max(len(g.claims), 1), 1)
	for p, c := range g.claims {
		start := g.starts[p]
		s.run(gen, func(ctx context.Context) { s.read(ctx, g, c, start, queue) })
	}
	s.run(gen, func(ctx context.Context) { s.commitGeneration(ctx, g) })
}

// run starts fn in gen, and counts it in s.wg so that Close waits for it
// even when kafka-go does not (fn started on an ended generation).
func (s *Kafka) run(gen *kafka.Generation, fn func(ctx context.Context)) {
	s.wg.Add(1)
	gen.Start(func(ctx context.Context) {
		defer s.wg.Done()
		fn(ctx)
	})
}

// read hands the messages of c's partition, from start, to Fetch until ctx
// ends with the generation g, but for those finished before (start.ahead, or
// what restore finds), which it skips. It must not return before: the first
// function of a generation to return ends it.
func (s *Kafka) read(ctx context.Context, g *kafkaGeneration, c *kafkaClaim, start partitionStart, queue int) {
	ahead := start.ahead
	if start.restore {
		ahead = s.restore(ctx, g, c.partition, start.offset)
	}
	rc := s.readerCfg
	rc.Partition, rc.QueueCapacity = c.partition, queue
	r := kafka.NewReader(rc) // rc passed Validate in NewKafka, but for these two
	defer func() {
		_ = r.Close() // waits out the fetch in flight: at most MaxWait
	}()
	if err := r.SetOffset(start.offset); err != nil {
		s.health.fetchError(fmt.Errorf("partition %d: set offset %d: %w", c.partition, start.offset, err))
		<-ctx.Done()
		return
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.health.fetchError(fmt.Errorf("partition %d: %w", c.partition, err))
			if sleepCtx(ctx, kafkaErrorPause) != nil {
				return
			}
			continue
		}
		for len(ahead) > 0 && ahead[0].to < m.Offset {
			ahead = ahead[1:]
		}
		if len(ahead) > 0 && ahead[0].from <= m.Offset {
			s.skip(g, m)
			continue
		}
		select {
		case s.incoming <- kafkaFetched{gen: g, claim: c, msg: m}:
		case <-ctx.Done():
			return // m was not handed out: the partition's next reader reads it again
		}
	}
}

// commitGeneration commits, with g, the marks that advanced, at most once
// every CommitInterval, until ctx ends with g; then it ends g (see
// endGeneration).
func (s *Kafka) commitGeneration(ctx context.Context, g *kafkaGeneration) {
	last := time.Now()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			continue
		case <-s.commitWake:
		}
		if sleepCtx(ctx, time.Until(last.Add(s.cfg.CommitInterval))) != nil {
			break
		}
		last = time.Now()
		if err := s.commit(g, s.ownMarks(g, s.marks.advanced(nil), claimOwned)); err != nil {
			s.log.Debug("kafka: commit offsets; retried at the next commit", "err", err)
		}
	}
	s.endGeneration(g)
}

// endGeneration suspends g's claims, so that its messages report Revoked and
// no more are handed out; waits up to settleWait for the messages it handed
// out to settle (requests in flight finish; the pipeline nacks the rest); and
// commits every partition's mark with g, so that the partition's next owner
// starts after all that this member finished. The group accepts this commit
// while it waits for its members to rejoin, and this member rejoins only
// after it.
func (s *Kafka) endGeneration(g *kafkaGeneration) {
	s.mu.Lock()
	s.suspendLocked(g)
	s.mu.Unlock()
	s.awaitSettled(g)
	if err := s.commit(g, s.ownMarks(g, s.marks.final(nil), claimSuspended)); err != nil {
		s.log.Warn("kafka: could not commit the finished offsets at the end of a generation; messages finished since the last commit may be delivered again",
			"generation", g.gen.ID, "err", err)
	}
}

// suspendLocked ends g for Fetch and the receipts, if it is still the
// running generation. It requires that s.mu is held.
func (s *Kafka) suspendLocked(g *kafkaGeneration) {
	if s.gen != g {
		return
	}
	s.gen = nil
	for _, c := range g.claims {
		c.state.Store(claimSuspended)
	}
}

// awaitSettled waits until no message of g's claims is outstanding, for at
// most settleWait, and not at all once Close has begun (the pipeline has
// settled everything by then).
func (s *Kafka) awaitSettled(g *kafkaGeneration) {
	t := time.NewTimer(s.settleWait)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := 0
		for _, c := range g.claims {
			n += c.outstanding
		}
		closed := s.closed
		s.mu.Unlock()
		if n == 0 || closed {
			return
		}
		select {
		case <-s.settleWake:
		case <-t.C:
			s.log.Debug("kafka: generation ended with messages not settled; their partitions' next owners may deliver them again",
				"generation", g.gen.ID, "messages", n)
			return
		case <-s.done:
			return
		}
	}
}

// ownMarks returns the marks of the partitions whose claim in g is in state:
// a commit with g never covers a partition g did not assign to this member.
func (s *Kafka) ownMarks(g *kafkaGeneration, marks []partitionMark, state int32) []partitionMark {
	return slices.DeleteFunc(marks, func(m partitionMark) bool {
		c := g.claims[m.Partition]
		return c == nil || c.state.Load() != state
	})
}

// commit commits marks with g: each partition's offset and, as its
// metadata, the offsets finished above it. Like kafka-go's
// Generation.CommitOffsets, which cannot carry metadata, it commits with
// g's generation ID and member ID, so the group refuses it once g is over
// and another member may own the partitions. The marks of partitions that
// failed are returned again by the tracker's next advanced or final.
//
// When the broker refuses the metadata as too large (its
// offset.metadata.max.bytes is below kafkaMetadataMax), commit halves the
// limit for good and commits those partitions again with less of it.
func (s *Kafka) commit(g *kafkaGeneration, marks []partitionMark) error {
	ctx, cancel := context.WithTimeout(context.Background(), kafkaRequestTimeout)
	defer cancel()
	var errs []error
	limit := -1
	for len(marks) > 0 {
		tooLarge, err := s.commitOffsets(ctx, g, marks)
		if err != nil {
			errs = append(errs, err)
		}
		if len(tooLarge) == 0 {
			break
		}
		limit = s.marks.shrinkMetadata()
		for i := range tooLarge {
			tooLarge[i].Metadata = truncateMetadata(tooLarge[i].Metadata, limit)
		}
		marks = tooLarge
	}
	if limit >= 0 {
		s.log.Warn("kafka: the broker refused the commit metadata as too large (offset.metadata.max.bytes); committing less of it, so more finished messages may come again after a restart or a rebalance",
			"limit_bytes", limit)
	}
	return errors.Join(errs...)
}

// commitOffsets sends one OffsetCommit of marks with g, and records which
// partitions it committed. It returns the marks whose metadata the broker
// refused as too large; the tracker returns the other failed ones again.
func (s *Kafka) commitOffsets(ctx context.Context, g *kafkaGeneration, marks []partitionMark) ([]partitionMark, error) {
	offsets := make(map[int]int64, len(marks))
	parts := make([]offsetcommit.RequestPartition, len(marks))
	for i, m := range marks {
		offsets[m.Partition] = m.Offset
		parts[i] = offsetcommit.RequestPartition{
			PartitionIndex:       int32(m.Partition),
			CommittedOffset:      m.Offset,
			CommittedLeaderEpoch: -1, // unknown: kafka-go tracks no leader epochs
			CommittedMetadata:    m.Metadata,
		}
	}
	req := &offsetcommit.Request{
		GroupID:         s.cfg.Group,
		GenerationID:    g.gen.ID,
		MemberID:        g.gen.MemberID,
		RetentionTimeMs: -1, // the broker's offsets.retention.minutes
		Topics:          []offsetcommit.RequestTopic{{Name: s.cfg.Topic, Partitions: parts}},
	}
	res, err := s.transport.RoundTrip(ctx, s.addr, req)
	if err != nil {
		s.marks.retry(marks)
		return nil, fmt.Errorf("kafka: commit offsets %v in generation %d: %w", offsets, g.gen.ID, err)
	}
	answers := make(map[int]error, len(marks))
	if r, ok := res.(*offsetcommit.Response); ok {
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if t.Name == s.cfg.Topic {
					var err error
					if p.ErrorCode != 0 {
						err = kafka.Error(p.ErrorCode)
					}
					answers[int(p.PartitionIndex)] = err
				}
			}
		}
	}
	var done, failed, tooLarge []partitionMark
	var errs []error
	for _, m := range marks {
		err, answered := answers[m.Partition]
		switch {
		case !answered:
			err = errors.New("no answer")
		case err == nil:
			done = append(done, m)
			continue
		case errors.Is(err, kafka.OffsetMetadataTooLarge) && m.Metadata != "":
			tooLarge = append(tooLarge, m)
			continue
		}
		failed = append(failed, m)
		errs = append(errs, fmt.Errorf("partition %d: %w", m.Partition, err))
	}
	s.marks.setCommitted(done)
	s.marks.retry(failed)
	if len(errs) > 0 {
		return tooLarge, fmt.Errorf("kafka: commit offsets %v in generation %d: %w", offsets, g.gen.ID, errors.Join(errs...))
	}
	return tooLarge, nil
}

// restore reads the group's committed offset of partition and its metadata,
// and has the tracker take the offsets the metadata records as finished. It
// returns those offsets, for the reader to skip; none when the group has no
// offset (start < 0), when the metadata records none or is not this
// source's, when the committed offset is not start, the one the generation
// assigned, or when it cannot be read: their messages are then delivered
// again, which at-least-once allows.
func (s *Kafka) restore(ctx context.Context, g *kafkaGeneration, partition int, start int64) []offsetRange {
	if start < 0 {
		return nil
	}
	var committed int64
	var md string
	var err error
	for attempt := 1; ; attempt++ {
		committed, md, err = s.fetchCommitted(ctx, partition)
		if err == nil || attempt == kafkaRestoreAttempts || sleepCtx(ctx, kafkaErrorPause) != nil {
			break
		}
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn("kafka: could not read the commit metadata; the messages finished above the committed offset are delivered again",
				"partition", partition, "err", err)
		}
		return nil
	case committed != start:
		s.log.Debug("kafka: committed offset moved since the assignment; commit metadata ignored",
			"partition", partition, "assigned", start, "committed", committed)
		return nil
	}
	ahead := parseFinished(committed, md)
	if len(ahead) == 0 {
		if md != "" {
			s.log.Info("kafka: commit metadata ignored: not this source's format, or not for the committed offset",
				"partition", partition, "metadata", truncateText(md, 64))
		}
		return nil
	}
	s.mu.Lock()
	current := s.gen == g
	if current {
		s.marks.restore(partition, committed, ahead)
	}
	s.mu.Unlock()
	if !current {
		return nil // g ended meanwhile: the next generation reads it again
	}
	var n int64
	for _, r := range ahead {
		n += r.to - r.from + 1
	}
	s.log.Info("kafka: skipping the messages finished above the committed offset",
		"partition", partition, "committed", committed, "finished", n, "from", ahead[0].from, "to", ahead[len(ahead)-1].to)
	return ahead
}

// fetchCommitted returns the group's committed offset of partition (-1 when
// there is none) and its metadata.
func (s *Kafka) fetchCommitted(ctx context.Context, partition int) (int64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaRequestTimeout)
	defer cancel()
	c := kafka.Client{Addr: s.addr, Transport: s.transport}
	res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: s.cfg.Group,
		Topics:  map[string][]int{s.cfg.Topic: {partition}},
	})
	if err != nil {
		return 0, "", err
	}
	if res.Error != nil {
		return 0, "", res.Error
	}
	for _, p := range res.Topics[s.cfg.Topic] {
		if p.Partition == partition {
			return p.CommittedOffset, p.Metadata, p.Error
		}
	}
	return 0, "", fmt.Errorf("no offset of partition %d in the answer", partition)
}

// truncateText returns s cut to at most n bytes, marked with "..." when cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
