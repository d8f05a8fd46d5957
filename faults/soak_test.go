package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
)

// TestSoak runs mixed faults for -soak (opt-in, not in CI) against a
// JetStream and a Kafka pipeline side by side, with producers publishing
// all along: random SIGKILLs and graceful restarts of the shaper, sink error
// bursts, hangs and rejections, broker restarts. At the end it counts what
// became of every message the brokers hold:
//
//	go test -race -run TestSoak -timeout 20m ./faults/ -args -soak=10m
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("opt-in: go test -run TestSoak -timeout 20m ./faults/ -args -soak=10m")
	}
	eachBroker(t, 0, func(t *testing.T, f fixture) { soak(t, f, *soakFor) })
}

// soakSink misbehaves at random: bursts of 503 the chaos loop turns on,
// and otherwise 1% hangs, 1% resets and 0.5% rejections (dead letters).
type soakSink struct {
	burst atomic.Bool
}

func (s *soakSink) rule(r *http.Request, attempt int) sinktest.Action {
	if s.burst.Load() {
		return sinktest.Action{Status: http.StatusServiceUnavailable}
	}
	switch x := rand.Float64(); {
	case x < 0.01:
		return sinktest.Action{Hang: true}
	case x < 0.02:
		return sinktest.Action{Reset: true}
	case x < 0.025 && attempt == 1:
		return sinktest.Action{Status: http.StatusBadRequest}
	}
	return sinktest.Action{Delay: time.Duration(rand.IntN(20)) * time.Millisecond}
}

func soak(t *testing.T, f fixture, d time.Duration) {
	const limit, produceRate = 200, 150
	ss := &soakSink{}
	sink := sinktest.Start(t, ss.rule)
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Drain:  2 * time.Second,
		Source: f.source,
		Rate:   fmt.Sprintf("{limit: %d}", limit),
		Sink: fmt.Sprintf(`{http: {url: "%s", max_in_flight: 8, timeout: 500ms, retry: {max_attempts: 5, initial_backoff: 100ms, max_backoff: 2s, max_elapsed: 1m}}}`,
			sink.URL),
		DeadLetter: f.deadLetter,
	}.YAML())

	ctx, stopProducing := context.WithCancel(context.Background())
	var producing sync.WaitGroup
	producing.Go(func() { produce(ctx, f, produceRate) })
	// The chaos loop's waits end with the soak: a fault in progress at
	// its end is ended then.
	soaking, stopSoaking := context.WithTimeout(t.Context(), d)
	defer stopSoaking()

	counts := map[string]int{}
	type event struct {
		at   time.Time
		kind string
	}
	var events []event
	life := 1
	p := startShaper(t, "life-1", config)
	restart := func() {
		life++
		p = startShaper(t, "life-"+strconv.Itoa(life), config)
	}
	for hold(soaking, jitter(2*time.Second, 8*time.Second)) {
		var kind string
		switch x := rand.IntN(10); {
		case x < 3:
			kind = "SIGKILL"
			counts["SIGKILL"]++
			p.Kill()
			restart()
		case x < 5:
			kind = "SIGTERM drain"
			counts["SIGTERM drain"]++
			p.Signal(syscall.SIGTERM)
			if code := p.Wait(30 * time.Second); code != 0 {
				t.Errorf("life %d: exit code after SIGTERM = %d; want 0", life, code)
			}
			restart()
		case x < 7:
			kind = "broker restart"
			counts["broker restart"]++
			if f.nats != nil {
				f.nats.stop()
				hold(soaking, jitter(time.Second, 4*time.Second))
				f.nats.start()
			} else {
				f.kafka.Stop()
				hold(soaking, jitter(time.Second, 4*time.Second))
				f.kafka.Restart()
			}
		default:
			kind = "sink 503 burst"
			counts["sink 503 burst"]++
			ss.burst.Store(true)
			hold(soaking, jitter(500*time.Millisecond, 3*time.Second))
			ss.burst.Store(false)
		}
		events = append(events, event{time.Now(), kind})
		if p.Exited() {
			t.Fatalf("life %d exited on its own: %v", life, p.Cmd.ProcessState)
		}
	}
	stopProducing()
	producing.Wait()

	ids := f.allIDs()
	// Done when the broker has every message as finished: each got its
	// final outcome and was acked or committed.
	f.settled(3 * time.Minute)
	p.Stop()
	dls := f.dlq(0)
	o := account(t, ids, sink, dls)
	t.Logf("soak %v on %s: faults %v; %d shaper lives", d, f.kind, counts, life)
	t.Logf("messages %d, delivered %d, dead-lettered %d, lost %d, duplicates %d, requests %d",
		len(ids), len(o.delivered), len(o.deadLettered), len(o.lost), o.duplicates, sink.RequestCount())
	// Each duplicate is put down to the last fault before it.
	byFault := map[string]int{}
	seen := map[string]bool{}
	for _, r := range sink.Requests() {
		if r.Status < 200 || r.Status > 299 || r.GaveUp {
			continue
		}
		if !seen[r.Key] {
			seen[r.Key] = true
			continue
		}
		cause := "before any fault"
		for _, e := range events {
			if e.at.After(r.At) {
				break
			}
			cause = e.kind
		}
		byFault[cause]++
	}
	t.Logf("duplicates after each kind of fault: %v", byFault)
}

// hold waits d, the length of a fault or of the calm between two, and
// reports true; or false at once when ctx ends first.
func hold(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// produce publishes `{"n":i}` at about rate messages a second until ctx
// ends, retrying through broker outages.
func produce(ctx context.Context, f fixture, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var nc *nats.Conn
	var js jetstream.JetStream
	var kc *kgo.Client
	defer func() {
		if nc != nil {
			nc.Close()
		}
		if kc != nil {
			kc.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		payload := []byte(`{"n":` + strconv.Itoa(i) + `}`)
		for ctx.Err() == nil {
			var err error
			if f.nats != nil {
				if nc == nil {
					nc, err = nats.Connect(f.nats.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
					if err == nil {
						js, _ = jetstream.New(nc)
					}
				}
				if err == nil {
					pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err = js.Publish(pctx, "in.faults", payload)
					cancel()
				}
			} else {
				if kc == nil {
					kc, err = kgo.NewClient(kgo.SeedBrokers(f.kafka.Addr), kgo.DefaultProduceTopic("in"))
				}
				if err == nil {
					pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					err = kc.ProduceSync(pctx, &kgo.Record{Value: payload}).FirstErr()
					cancel()
				}
			}
			if err == nil || !hold(ctx, 100*time.Millisecond) {
				break
			}
		}
	}
}
