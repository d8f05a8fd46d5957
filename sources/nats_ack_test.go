package sources

import (
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// recordedAck is a jetstream.Msg whose Ack records when it was published.
type recordedAck struct {
	jetstream.Msg // nil: only Ack is called
	seq           int
	log           *ackLog
}

func (m recordedAck) Ack() error {
	m.log.mu.Lock()
	defer m.log.mu.Unlock()
	m.log.acks = append(m.log.acks, publishedAck{m.seq, time.Since(m.log.epoch)})
	return nil
}

// ackLog is what recordedAcks published, in order.
type ackLog struct {
	epoch time.Time
	mu    sync.Mutex
	acks  []publishedAck
}

type publishedAck struct {
	seq int
	at  time.Duration // since epoch
}

func (l *ackLog) get() []publishedAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acks)
}

// Acks gather for natsAckEvery after a publish and go with the first ack
// after it, on that ack's goroutine: at a steady 100/s, five at a time and
// only at the moments an ack comes, so the timer for a tail never fires.
// A tail no later ack takes along goes natsAckEvery after its first ack,
// and Close publishes what is still gathering. Each batch is in the order
// of its acks. On synctest's fake clock.
func TestJetStreamAcksGatherAndGoWithALaterAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if natsAckEvery%(10*time.Millisecond) != 0 || natsAckEvery < 20*time.Millisecond {
			t.Fatalf("natsAckEvery %v: the test assumes a multiple of 10ms from 20ms", natsAckEvery)
		}
		acks := &ackLog{epoch: time.Now()}
		var log []publishedAck
		s := &JetStream{done: make(chan struct{}), ackTail: time.NewTimer(time.Hour), log: slog.New(slog.DiscardHandler)}
		s.ackTail.Stop()
		s.wg.Add(1)
		go s.publishAcks()
		seq := 0
		ack := func() {
			seq++
			if err := s.ack(recordedAck{seq: seq, log: acks}); err != nil {
				t.Fatalf("ack %d: %v", seq, err)
			}
		}

		// Steady: 30 acks 10 ms apart, from 0 to 290 ms.
		for i := range 30 {
			if i > 0 {
				time.Sleep(10 * time.Millisecond)
			}
			ack()
		}
		synctest.Wait()
		log = acks.get()
		step := natsAckEvery.Milliseconds() / 10 // acks per batch
		for i, p := range log {
			ackedAt := time.Duration(p.seq-1) * 10 * time.Millisecond
			// Ack 1 goes at once (nothing was published before it); the
			// others with the first ack natsAckEvery after the last publish.
			wantAt := time.Duration((int64(p.seq-1)+step-1)/step) * natsAckEvery
			if p.seq != i+1 || p.at != wantAt {
				t.Fatalf("publish %d: ack %d at %v (acked at %v); want ack %d at %v: %v", i, p.seq, p.at, ackedAt, i+1, wantAt, log)
			}
		}
		if want := 26; len(log) != want { // 27 to 30 gather after the publish at 250 ms
			t.Fatalf("%d acks published by 290 ms; want %d: %v", len(log), want, log)
		}

		// The tail (27..30, first gathered at 260 ms) goes at 310 ms.
		time.Sleep(time.Second)
		log = acks.get()
		if len(log) != 30 || log[29].seq != 30 || log[26].at != 310*time.Millisecond || log[29].at != 310*time.Millisecond {
			t.Fatalf("the tail: %v; want acks 27 to 30 published at 310ms", log[26:])
		}

		// After an idle spell an ack goes at once; one within
		// natsAckEvery gathers, and Close publishes it.
		ack() // 31, at 1290 ms
		time.Sleep(10 * time.Millisecond)
		ack() // 32 gathers
		synctest.Wait()
		log = acks.get()
		if len(log) != 31 || log[30].at != 1290*time.Millisecond {
			t.Fatalf("after an idle spell: %v; want ack 31 at once (1.29s) and 32 gathering", log[30:])
		}
		close(s.done)
		s.wg.Wait()
		log = acks.get()
		if len(log) != 32 || log[31].seq != 32 || log[31].at != 1300*time.Millisecond {
			t.Fatalf("at close: %v; want ack 32 published at 1.3s", log[30:])
		}
		ack() // after close: at once
		if log = acks.get(); len(log) != 33 {
			t.Fatalf("an ack after close is not published at once: %v", log[31:])
		}
	})
}
