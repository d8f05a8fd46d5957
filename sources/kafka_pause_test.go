package sources

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// pause pauses m's partition through its receipt, and fails the test if the
// receipt is not shaper.Pausable.
func pause(t *testing.T, m *shaper.Message) (resume func()) {
	t.Helper()
	p, ok := m.Receipt.(shaper.Pausable)
	if !ok {
		t.Fatalf("receipt of %s is a %T; want a shaper.Pausable", m.ID, m.Receipt)
	}
	return p.Pause()
}

// pausePartition0 fetches from src into d until a message of partition 0
// comes, pauses it, and returns its resume.
func pausePartition0(t *testing.T, src shaper.Source, d *deliveries) (resume func()) {
	t.Helper()
	fetchUntil(t, src, func() bool { return resume != nil }, func(msgs []*shaper.Message) {
		d.add(msgs, 0)
		for _, m := range msgs {
			if p, _ := partitionOffset(t, m.ID); p == 0 && resume == nil {
				resume = pause(t, m)
			}
		}
	})
	return resume
}

// fetchUntil fetches up to 10 messages at a time and hands each batch to
// take until done, and fails the test if that takes more than 20s.
func fetchUntil(t *testing.T, src shaper.Source, done func() bool, take func([]*shaper.Message)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !done() {
		msgs, err := fetch(src, 10, time.Until(deadline))
		if err != nil {
			t.Fatalf("Fetch(10): %v", err)
		}
		take(msgs)
	}
}

// fetchFor returns everything src delivers in d.
func fetchFor(t *testing.T, src shaper.Source, d time.Duration) []*shaper.Message {
	t.Helper()
	var got []*shaper.Message
	for end := time.Now().Add(d); time.Now().Before(end); {
		msgs, err := fetch(src, 100, time.Until(end))
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fetch: %v", err)
		}
		got = append(got, msgs...)
	}
	return got
}

// deliveries counts the deliveries of each message by ID and per partition.
type deliveries struct {
	t     *testing.T
	all   []*shaper.Message
	times map[string]int
	per   map[int]int
}

func newDeliveries(t *testing.T) *deliveries {
	return &deliveries{t: t, times: make(map[string]int), per: make(map[int]int)}
}

// add counts msgs, and returns how many of them are of partition.
func (d *deliveries) add(msgs []*shaper.Message, partition int) int {
	n := 0
	for _, m := range msgs {
		p, _ := partitionOffset(d.t, m.ID)
		d.all = append(d.all, m)
		d.times[m.ID]++
		d.per[p]++
		if p == partition {
			n++
		}
	}
	return n
}

// checkOnce fails the test unless n distinct messages came, each once.
func (d *deliveries) checkOnce(n int) {
	d.t.Helper()
	for id, k := range d.times {
		if k != 1 {
			d.t.Errorf("%s delivered %d times; want once", id, k)
		}
	}
	if len(d.times) != n {
		d.t.Errorf("delivered %d distinct messages; want %d", len(d.times), n)
	}
}

// A pause holds back the messages of its partition that the reader has not
// handed to Fetch yet, and only those: the other partition delivers
// everything meanwhile, and after resume the paused one delivers the rest,
// nothing lost and nothing twice.
func TestKafkaPauseHoldsBackOnlyItsPartitionUntilResumed(t *testing.T) {
	t.Parallel()
	const perPartition = 300
	_, cl, cfg := startKafkaGroup(t)
	produce(t, cl, 0, perPartition, 0)
	produce(t, cl, 0, perPartition/2, 1)
	src, _ := newKafkaSource(t, cfg, 1000) // each of the 4 readers fetches 25 ahead
	got := newDeliveries(t)

	resume := pausePartition0(t, src, got)
	before0, before1 := got.per[0], got.per[1]
	// Partition 1 may have delivered its backlog before partition 0's first
	// message came: it gets more now, to show it flows during the pause.
	produce(t, cl, perPartition/2, perPartition/2, 1)

	// Partition 1 delivers all of it while partition 0 is paused. The
	// reader of partition 0 hands out at most the message it was handing
	// over as Pause came (this test's Fetch calls never overlap Pause, but
	// the reader may not have seen the pause yet); kafka-go's queue keeps
	// the messages it fetched ahead.
	var after int
	fetchUntil(t, src, func() bool { return got.per[1] == perPartition }, func(msgs []*shaper.Message) {
		after += got.add(msgs, 0)
	})
	after += got.add(fetchFor(t, src, 300*time.Millisecond), 0)
	if after > 1 {
		t.Errorf("fetched %d messages of paused partition 0 after Pause; want at most 1", after)
	}
	t.Logf("delivered before Pause: %d of partition 0, %d of partition 1; of partition 0 after it while paused: %d",
		before0, before1, after)

	resume()
	fetchUntil(t, src, func() bool { return got.per[0] == perPartition }, func(msgs []*shaper.Message) {
		got.add(msgs, 0)
	})
	got.add(fetchFor(t, src, 300*time.Millisecond), 0)
	got.checkOnce(2 * perPartition)
	ack(t, got.all...)
	waitCommitted(t, cl, "g", map[int]int64{0: perPartition, 1: perPartition, 2: -1, 3: -1})
}

// Pauses nest: the partition stays paused until every resume has been
// called, and calling a resume twice counts once.
func TestKafkaNestedPausesHoldThePartitionUntilEveryResume(t *testing.T) {
	t.Parallel()
	const n = 100
	cl, _, src := kafkaMember(t, n, 1000, 0)
	got := newDeliveries(t)

	first := fetchN(t, src, 2, 1)
	got.add(first, 0)
	resume0, resume1 := pause(t, first[0]), pause(t, first[1])
	// At most the message the reader was handing over as the first Pause
	// came (see TestKafkaPauseHoldsBackOnlyItsPartitionUntilResumed).
	after := got.add(fetchFor(t, src, 300*time.Millisecond), 0)

	resume0()
	resume0() // counts once: the second pause still holds
	after += got.add(fetchFor(t, src, 300*time.Millisecond), 0)
	if after > 1 {
		t.Fatalf("fetched %d messages while paused twice and resumed once; want at most 1", after)
	}

	resume1()
	fetchUntil(t, src, func() bool { return got.per[0] == n }, func(msgs []*shaper.Message) {
		got.add(msgs, 0)
	})
	resume1() // a late second call does nothing
	got.add(fetchFor(t, src, 300*time.Millisecond), 0)
	got.checkOnce(n)
	ack(t, got.all...)
	waitCommitted(t, cl, "g", map[int]int64{0: n, 1: -1, 2: -1, 3: -1})
}

// A pause holds back only new messages: an Ack commits, a rebalance and a
// Close end the paused reader as ever, and the partition's next owner
// delivers the rest; the late resume does no harm.
func TestKafkaPauseHoldsUpNoCommitRebalanceOrClose(t *testing.T) {
	t.Parallel()
	const n = 100
	cl, cfg, a := kafkaMember(t, n, 1000, 0)

	m := fetchN(t, a, 1, 1)[0]
	if m.ID != "topic/0/0" {
		t.Fatalf("first message = %s; want topic/0/0", m.ID)
	}
	resume := pause(t, m)
	ack(t, m)
	waitCommitted(t, cl, "g", map[int]int64{0: 1, 1: -1, 2: -1, 3: -1})

	// The rebalance ends the generation, and with it the paused reader: the
	// group becomes stable with both members.
	b, _ := newKafkaSource(t, cfg, 1000)
	waitGroupStable(t, cl, "g", 2)
	aGot := fetchFor(t, a, 300*time.Millisecond)
	if len(aGot) > 1 {
		t.Fatalf("a fetched %v while partition 0 was paused; want at most the message in handover", ids(aGot))
	}
	closeSource(t, a) // within 20s, with the pause never resumed
	resume()          // after Close: does nothing

	// b delivers everything but the committed first message, the one a
	// may have handed over included: a never settled it.
	got := newDeliveries(t)
	fetchUntil(t, b, func() bool { return len(got.times) == n-1 }, func(msgs []*shaper.Message) {
		got.add(msgs, 0)
	})
	got.add(fetchFor(t, b, 300*time.Millisecond), 0)
	if _, ok := got.times[m.ID]; ok {
		t.Errorf("%s, acked and committed, was delivered again", m.ID)
	}
	got.checkOnce(n - 1)
	ack(t, got.all...)
	waitCommitted(t, cl, "g", map[int]int64{0: n, 1: -1, 2: -1, 3: -1})
}

func TestKafkaClaimPausesNestAndAResumeCountsOnce(t *testing.T) {
	t.Parallel()
	c := newKafkaClaim(0)
	d := &kafkaDelivery{claim: c}
	paused := func() bool { p, _ := c.pauseState(); return p }
	changedBy := func(fn func()) bool {
		_, changed := c.pauseState()
		fn()
		select {
		case <-changed:
			return true
		default:
			return false
		}
	}

	var r1, r2 func()
	if !changedBy(func() { r1 = d.Pause() }) || !paused() {
		t.Fatal("first Pause did not pause the claim, or woke no waiter")
	}
	if changedBy(func() { r2 = d.Pause() }) || !paused() {
		t.Fatal("second Pause woke the waiter; want no change: the claim is paused already")
	}
	if changedBy(r1) || changedBy(r1) || !paused() {
		t.Fatal("one resume, called twice, unpaused the claim; want it paused until the second resume")
	}
	if !changedBy(r2) || paused() {
		t.Fatal("the last resume did not unpause the claim, or woke no waiter")
	}
	if changedBy(r2) || paused() {
		t.Fatal("the last resume called again changed the claim")
	}
}
