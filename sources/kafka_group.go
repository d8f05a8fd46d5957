package sources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
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
	claims map[int]*kafkaClaim // by partition: those assigned to this member
	starts map[int]int64       // by partition: where its reader starts
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
// StartOffset (FirstOffset or LastOffset) when the group has none.
func (s *Kafka) begin(gen *kafka.Generation) {
	assigned := make(map[int]int64)
	for _, a := range gen.Assignments[s.cfg.Topic] {
		assigned[a.ID] = a.Offset
	}
	g := &kafkaGeneration{
		gen:    gen,
		claims: make(map[int]*kafkaClaim, len(assigned)),
		starts: make(map[int]int64, len(assigned)),
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
			if next, ok := s.marks.next(p); ok {
				offset = next
			}
			g.claims[p], g.starts[p] = c, offset
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
			s.claims[p], g.claims[p], g.starts[p] = c, c, offset
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

// read hands the messages of c's partition, from offset start, to Fetch
// until ctx ends with the generation g. It must not return before: the first
// function of a generation to return ends it.
func (s *Kafka) read(ctx context.Context, g *kafkaGeneration, c *kafkaClaim, start int64, queue int) {
	rc := s.readerCfg
	rc.Partition, rc.QueueCapacity = c.partition, queue
	r := kafka.NewReader(rc) // rc passed Validate in NewKafka, but for these two
	defer func() {
		_ = r.Close() // waits out the fetch in flight: at most MaxWait
	}()
	if err := r.SetOffset(start); err != nil {
		s.health.fetchError(fmt.Errorf("partition %d: set offset %d: %w", c.partition, start, err))
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

// commit commits marks with g. The marks of a failed commit are returned
// again by the tracker's next advanced or final.
func (s *Kafka) commit(g *kafkaGeneration, marks []partitionMark) error {
	if len(marks) == 0 {
		return nil
	}
	offsets := make(map[int]int64, len(marks))
	for _, m := range marks {
		offsets[m.Partition] = m.Offset
	}
	if err := g.gen.CommitOffsets(map[string]map[int]int64{s.cfg.Topic: offsets}); err != nil {
		s.marks.retry(marks)
		return fmt.Errorf("kafka: commit offsets %v in generation %d: %w", offsets, g.gen.ID, err)
	}
	s.marks.setCommitted(marks)
	return nil
}
