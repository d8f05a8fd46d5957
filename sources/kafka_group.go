package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/shaper"
)

// kafkaSession is this member's session in the consumer group: its
// membership (kafka-go's ConsumerGroup, joined once the topic is first
// seen), the generations it runs one after the other, the partitions each
// assigns it (claims), and the commits of their finished offsets with the
// generation, metadata included. It also holds the nacked messages waiting
// for redelivery, since which of them may come back depends on the claims.
//
// What each claimed partition may commit is a commitTracker, a value of
// offsets alone that the session guards with its mu and tells what was
// fetched, settled and committed; the groupCoordinator sends the commits.
// The partitionFetcher reads the claimed partitions; Kafka hands out what
// it reads, and its receipts settle here.
type kafkaSession struct {
	cfg         KafkaConfig
	groupCfg    kafka.ConsumerGroupConfig
	settleWait  time.Duration // how long the end of a generation waits for its messages
	log         *slog.Logger
	health      *kafkaHealth
	coordinator *groupCoordinator // commits, and reads the committed offsets
	fetcher     *partitionFetcher

	group      atomic.Pointer[kafka.ConsumerGroup] // nil until the topic is first seen
	wake       chan struct{}                       // size 1: a nacked message may be due, or a generation began
	commitWake chan struct{}                       // size 1: a mark advanced
	settleWake chan struct{}                       // size 1: a message of an ended generation settled
	done       chan struct{}                       // closed by close
	wg         sync.WaitGroup                      // consume, and every function of every generation

	mu       sync.Mutex
	marks    *commitTracker      // what each claimed partition may commit
	gen      *kafkaGeneration    // the running generation; nil between generations
	genID    int32               // the ID of the last generation begun
	memberID string              // this member's ID in it
	claims   map[int]*kafkaClaim // by partition: owned in gen, or suspended since the last one ended
	nacked   delayQueue[*kafkaDelivery]
	closed   bool
}

func newKafkaSession(cfg KafkaConfig, groupCfg kafka.ConsumerGroupConfig, transport *kafka.Transport,
	fetcher *partitionFetcher, health *kafkaHealth, log *slog.Logger) *kafkaSession {
	return &kafkaSession{
		cfg:         cfg,
		groupCfg:    groupCfg,
		settleWait:  min(cfg.RebalanceTimeout/4, cfg.SessionTimeout/4, kafkaSettleWaitMax),
		log:         log,
		health:      health,
		marks:       newCommitTracker(),
		coordinator: newGroupCoordinator(transport, kafka.TCP(cfg.Brokers...), cfg.Group, cfg.Topic),
		fetcher:     fetcher,
		wake:        make(chan struct{}, 1),
		commitWake:  make(chan struct{}, 1),
		settleWake:  make(chan struct{}, 1),
		done:        make(chan struct{}),
		claims:      make(map[int]*kafkaClaim),
	}
}

// start joins the consumer group, unless the member has joined already.
// health.watch calls it whenever a probe sees the topic.
func (s *kafkaSession) start() {
	if s.group.Load() != nil {
		return
	}
	g, err := kafka.NewConsumerGroup(s.groupCfg)
	if err != nil {
		s.health.fail(fmt.Errorf("kafka: consumer group config: %w", err))
		return
	}
	s.group.Store(g)
	s.wg.Go(func() { s.consume(g) })
}

// leave leaves the group, which ends the running generation (it commits;
// see endGeneration), and waits until every function of every generation has
// returned. It does nothing if the member never joined.
func (s *kafkaSession) leave() {
	g := s.group.Load()
	if g == nil {
		return // the topic was never seen: nothing fetched, nothing committed
	}
	_ = g.Close() // never fails
	s.wg.Wait()
	s.coordinator.closeIdle() // after the last commit
}

// close ends the session for Fetch and the receipts, drops the nacked
// messages waiting (their offsets stay uncommitted), and returns how many
// there were.
func (s *kafkaSession) close() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.done)
	return s.nacked.Clear()
}

func (s *kafkaSession) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// running reports whether g is the running generation.
func (s *kafkaSession) running(g *kafkaGeneration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen == g
}

// lag returns the lag of every partition claimed and fetched from.
func (s *kafkaSession) lag() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	lag := make(map[string]int64, len(s.claims))
	for p, c := range s.claims {
		if n := c.lag.Load(); n >= 0 {
			lag[strconv.Itoa(p)] = n
		}
	}
	return lag
}

// admit tracks d's offset, read in generation g, as fetched and unfinished,
// and reports whether it did: not when g has ended (the partition's reader
// in the next one reads it again: this member's resumes after the last
// offset handed out, when it keeps the partition), nor when the offset was
// handed out already.
func (s *kafkaSession) admit(g *kafkaGeneration, d *kafkaDelivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != g || !s.marks.add(d.pending) {
		return false
	}
	d.claim.outstanding++
	return true
}

// redeliver appends to out the nacked messages that are due at now, up to
// max in all, and returns when the next one is due (zero when none waits or
// no generation runs: between generations, nothing is redelivered).
func (s *kafkaSession) redeliver(out []*shaper.Message, now time.Time, max int) ([]*shaper.Message, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return out, time.Time{}, errKafkaClosed
	}
	if s.gen == nil {
		return out, time.Time{}, nil
	}
	for len(out) < max {
		d, ok := s.nacked.PopDue(now)
		if !ok {
			break
		}
		if d.claim.state.Load() != claimOwned {
			continue // revoked: the partition's new owner delivers it
		}
		again := &kafkaDelivery{session: s, claim: d.claim, pending: d.pending, msg: d.msg}
		again.msg.Receipt = again
		d.claim.outstanding++
		out = append(out, &again.msg)
	}
	next, _ := s.nacked.Next()
	return out, next, nil
}

// finish marks d's offset finished, unless its partition was revoked, and
// wakes the generation's commit function: the partition's commit changed.
func (s *kafkaSession) finish(d *kafkaDelivery) error {
	s.mu.Lock()
	closed := s.closed
	state := d.claim.state.Load()
	d.claim.outstanding--
	changed := state != claimRevoked && s.marks.finish(d.pending)
	s.mu.Unlock()
	if changed {
		notify(s.commitWake)
	}
	switch {
	case state == claimSuspended:
		notify(s.settleWake)
	case state == claimRevoked:
		s.log.Info("kafka: message finished after a rebalance gave its partition to another member; that member may deliver it again",
			"id", d.msg.ID)
	}
	if closed {
		return fmt.Errorf("kafka: ack %s after close: %w; it is redelivered after a restart", d.msg.ID, errKafkaClosed)
	}
	return nil
}

// delay queues d for redelivery at now+delay, unless its partition was
// revoked, and wakes a waiting Fetch.
func (s *kafkaSession) delay(d *kafkaDelivery, delay time.Duration) error {
	due := time.Now().Add(max(delay, 0))
	s.mu.Lock()
	closed := s.closed
	state := d.claim.state.Load()
	d.claim.outstanding--
	if !closed && state != claimRevoked {
		s.nacked.Push(due, d)
	}
	s.mu.Unlock()
	switch state {
	case claimOwned:
		notify(s.wake)
	case claimSuspended:
		notify(s.settleWake)
	}
	if closed {
		return fmt.Errorf("kafka: nack %s after close: %w; it is redelivered after a restart", d.msg.ID, errKafkaClosed)
	}
	return nil
}

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
	// claimRevoked, which is final. It is written under kafkaSession.mu
	// and read without it by Revoked.
	state atomic.Int32
	// outstanding counts the claim's messages handed out by Fetch and not
	// yet settled. It is guarded by kafkaSession.mu.
	outstanding int
	// lag is how many messages lay behind the last one fetched from the
	// partition, as of that fetch; -1 before the first.
	lag atomic.Int64

	pauseMu sync.Mutex
	// paused counts the pauses of the partition not yet resumed
	// (kafkaDelivery.Pause): its reader hands out nothing while it is above
	// zero. It is guarded by pauseMu.
	paused int
	// pauseChanged is closed, and replaced, whenever paused goes from zero
	// to one or back, so that the reader can wait for the change in a
	// select with its ctx. It is guarded by pauseMu.
	pauseChanged chan struct{}
}

func newKafkaClaim(partition int) *kafkaClaim {
	c := &kafkaClaim{partition: partition, pauseChanged: make(chan struct{})}
	c.lag.Store(-1)
	return c
}

// pause stops c's reader handing out messages until every pause has been
// resumed.
func (c *kafkaClaim) pause() {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	if c.paused++; c.paused == 1 {
		c.pauseFlippedLocked()
	}
}

// resume takes back one pause; the last one lets c's reader go on.
func (c *kafkaClaim) resume() {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	if c.paused--; c.paused == 0 {
		c.pauseFlippedLocked()
	}
}

// pauseState reports whether c is paused, and returns a channel that is
// closed when that changes.
func (c *kafkaClaim) pauseState() (bool, <-chan struct{}) {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	return c.paused > 0, c.pauseChanged
}

// pauseFlippedLocked wakes whoever waits for c's pause state to change. It
// requires that c.pauseMu is held.
func (c *kafkaClaim) pauseFlippedLocked() {
	close(c.pauseChanged)
	c.pauseChanged = make(chan struct{})
}

// kafkaGeneration is one generation of the group as this member runs it.
type kafkaGeneration struct {
	gen    *kafka.Generation
	claims map[int]*kafkaClaim    // by partition: those assigned to this member
	starts map[int]partitionStart // by partition: where its reader starts
}

// consume runs the member's generations one after the other until the group
// is closed. kafka-go returns the next generation only after every function
// started in the previous one has returned.
func (s *kafkaSession) consume(group *kafka.ConsumerGroup) {
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
// its mark; its reader resumes after the last offset handed out (see
// commitTracker.resume). Any other claim is revoked, and a partition without
// a kept claim starts at the offset kafka-go puts in the assignment: the
// committed offset, or StartOffset (FirstOffset or LastOffset) when the
// group has none; its reader first reads the committed metadata, and skips
// the offsets it records as finished (see restore).
func (s *kafkaSession) begin(gen *kafka.Generation) {
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
		if ok && following {
			if start, keep := s.marks.resume(p, offset); keep {
				c.state.Store(claimOwned)
				g.claims[p], g.starts[p] = c, start
				kept = append(kept, p)
				continue
			}
		}
		c.state.Store(claimRevoked)
		delete(s.claims, p)
		s.marks.drop(p)
		revoked = append(revoked, p)
	}
	for p, offset := range assigned {
		if g.claims[p] == nil {
			c := newKafkaClaim(p)
			s.claims[p], g.claims[p], g.starts[p] = c, c, partitionStart{offset: offset, restore: true}
		}
	}
	if len(revoked) > 0 {
		s.nacked.Keep(func(d *kafkaDelivery) bool { return d.claim.state.Load() != claimRevoked })
	}
	s.gen = g
	s.mu.Unlock()
	notify(s.wake) // nacked messages of kept partitions may be due

	partitions := make([]int, 0, len(assigned))
	for p := range assigned {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)
	slices.Sort(kept)
	slices.Sort(revoked)
	s.log.Info("kafka: partitions assigned", "generation", gen.ID, "partitions", partitions, "kept", kept, "revoked", revoked)

	queue := s.fetcher.share(len(g.claims))
	for p, c := range g.claims {
		start := g.starts[p]
		s.run(gen, func(ctx context.Context) {
			ahead := start.ahead
			if start.restore {
				ahead = s.restore(ctx, g, c.partition, start.offset)
			}
			s.fetcher.read(ctx, g, c, start.offset, ahead, queue)
		})
	}
	s.run(gen, func(ctx context.Context) { s.commitGeneration(ctx, g) })
}

// run starts fn in gen, and counts it in s.wg so that Close waits for it
// even when kafka-go does not (fn started on an ended generation).
func (s *kafkaSession) run(gen *kafka.Generation, fn func(ctx context.Context)) {
	s.wg.Add(1)
	gen.Start(func(ctx context.Context) {
		defer s.wg.Done()
		fn(ctx)
	})
}

// commitGeneration commits, with g, the marks that advanced, at most once
// every CommitInterval (a commit that failed is tried again then), until ctx
// ends with g; then it ends g (see endGeneration).
func (s *kafkaSession) commitGeneration(ctx context.Context, g *kafkaGeneration) {
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
		if err := s.commit(g, s.ownMarks(g, claimOwned, (*commitTracker).advanced)); err != nil {
			s.log.Debug("kafka: commit offsets; retried after the commit interval", "err", err)
			notify(s.commitWake) // the marks that failed are returned again
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
func (s *kafkaSession) endGeneration(g *kafkaGeneration) {
	s.mu.Lock()
	s.suspendLocked(g)
	s.mu.Unlock()
	s.awaitSettled(g)
	if err := s.commit(g, s.ownMarks(g, claimSuspended, (*commitTracker).final)); err != nil {
		s.log.Warn("kafka: could not commit the finished offsets at the end of a generation; messages finished since the last commit may be delivered again",
			"generation", g.gen.ID, "err", err)
	}
}

// suspendLocked ends g for Fetch and the receipts, if it is still the
// running generation. It requires that s.mu is held.
func (s *kafkaSession) suspendLocked(g *kafkaGeneration) {
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
func (s *kafkaSession) awaitSettled(g *kafkaGeneration) {
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

// ownMarks returns the marks that collect (commitTracker.advanced or final)
// stages for a commit, of the partitions whose claim in g is in state: a
// commit with g never covers a partition g did not assign to this member.
func (s *kafkaSession) ownMarks(g *kafkaGeneration, state int32, collect func(*commitTracker, []partitionMark) []partitionMark) []partitionMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.DeleteFunc(collect(s.marks, nil), func(m partitionMark) bool {
		c := g.claims[m.Partition]
		return c == nil || c.state.Load() != state
	})
}

// commit commits marks with g (see groupCoordinator.commit): each
// partition's offset and, as its metadata, the offsets finished above it.
// The marks of partitions that failed are returned again by the tracker's
// next advanced or final.
//
// When the broker refuses the metadata as too large (its
// offset.metadata.max.bytes is below kafkaMetadataMax), commit halves the
// limit for good and commits those partitions again with less of it.
func (s *kafkaSession) commit(g *kafkaGeneration, marks []partitionMark) error {
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
		s.mu.Lock()
		limit = s.marks.shrinkMetadata()
		s.mu.Unlock()
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
func (s *kafkaSession) commitOffsets(ctx context.Context, g *kafkaGeneration, marks []partitionMark) ([]partitionMark, error) {
	answers, err := s.coordinator.commit(ctx, g.gen, marks)
	if err != nil {
		s.mu.Lock()
		s.marks.retry(marks)
		s.mu.Unlock()
		return nil, fmt.Errorf("kafka: commit offsets %v in generation %d: %w", markOffsets(marks), g.gen.ID, err)
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
	s.mu.Lock()
	s.marks.setCommitted(done)
	s.marks.retry(failed)
	s.mu.Unlock()
	if len(errs) > 0 {
		return tooLarge, fmt.Errorf("kafka: commit offsets %v in generation %d: %w", markOffsets(marks), g.gen.ID, errors.Join(errs...))
	}
	return tooLarge, nil
}

// markOffsets returns the offsets of marks by partition, for an error.
func markOffsets(marks []partitionMark) map[int]int64 {
	offsets := make(map[int]int64, len(marks))
	for _, m := range marks {
		offsets[m.Partition] = m.Offset
	}
	return offsets
}

// restore reads the group's committed offset of partition and its metadata,
// and has the tracker take the offsets the metadata records as finished. It
// returns those offsets, for the reader to skip; none when the group has no
// offset (start < 0), when the metadata records none or is not this
// source's, when the committed offset is not start, the one the generation
// assigned, or when it cannot be read: their messages are then delivered
// again, which at-least-once allows.
func (s *kafkaSession) restore(ctx context.Context, g *kafkaGeneration, partition int, start int64) []offsetRange {
	if start < 0 {
		return nil
	}
	var committed int64
	var md string
	var err error
	for attempt := 1; ; attempt++ {
		committed, md, err = s.coordinator.fetchCommitted(ctx, partition)
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
	var ahead []offsetRange
	s.mu.Lock()
	current := s.gen == g
	if current {
		ahead, err = s.marks.restore(partition, committed, md)
	}
	s.mu.Unlock()
	switch {
	case !current:
		return nil // g ended meanwhile: the next generation reads it again
	case err != nil:
		s.log.Info("kafka: commit metadata ignored; the messages finished above the committed offset are delivered again",
			"partition", partition, "err", err, "metadata", truncateText(md, 64))
		return nil
	case len(ahead) == 0:
		return nil
	}
	var n int64
	for _, r := range ahead {
		n += r.to - r.from + 1
	}
	s.log.Info("kafka: skipping the messages finished above the committed offset",
		"partition", partition, "committed", committed, "finished", n, "from", ahead[0].from, "to", ahead[len(ahead)-1].to)
	return ahead
}

// truncateText returns s cut to at most n bytes, marked with "..." when cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
