package faults_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// crashRun is what one life of a shaper process did before it was killed.
type crashRun struct {
	killedAfter time.Duration // from start to SIGKILL
	delivered   int           // unique messages delivered when it was killed
	duplicates  int           // 2xx answers in the next life for messages delivered before this kill
	finished    int           // messages the broker took as finished (acked, committed) at the kill
	early       []string      // of those, the ones the sink had not answered 2xx: acked too early
}

// crashLoop starts a shaper on config, kills it with SIGKILL at a random
// moment once it is delivering, and starts it again, kills times, then lets
// a last one finish until f's broker has every message as finished. It
// returns what each killed life did.
func crashLoop(t *testing.T, config string, sink *sinktest.Sink, n, kills int, f fixture) []crashRun {
	t.Helper()
	var runs []crashRun
	var cuts []time.Time // kill times
	var before []map[string]int
	for i := range kills {
		start := time.Now()
		base := sink.DeliveredCount()
		if base >= n {
			t.Logf("all %d delivered after %d kills; no load left to kill under", n, i)
			break
		}
		p := startShaper(t, fmt.Sprintf("life-%d", i+1), config)
		// Killed at a random moment once delivering: after 5 to 54 more
		// deliveries (up to half a second at the tests' 100/s).
		at := min(base+5+rand.IntN(50), n)
		testwait.For(t, 60*time.Second, "deliveries to resume after a restart", func() bool {
			return sink.DeliveredCount() >= at
		})
		p.Kill()
		got, _ := sink.Delivered()
		before = append(before, got)
		cuts = append(cuts, time.Now())
		ids, err := f.finished()
		if err != nil {
			t.Fatalf("after kill %d: what the broker has as finished: %v", i+1, err)
		}
		r := crashRun{killedAfter: time.Since(start), delivered: len(got), finished: len(ids)}
		for _, id := range ids {
			if got[id] == 0 {
				r.early = append(r.early, id)
			}
		}
		runs = append(runs, r)
	}
	last := startShaper(t, "last-life", config)
	testwait.For(t, 2*time.Minute, "every message delivered after the last restart", func() bool {
		return sink.DeliveredCount() >= n
	})
	// Nothing can come again once the broker has every message as
	// finished: a late duplicate has shown.
	f.settled(30 * time.Second)
	last.Stop()

	// Duplicates caused by kill i: 2xx answers after it (before the next
	// kill) for messages already delivered when it came.
	cuts = append(cuts, time.Now().Add(time.Hour))
	for _, r := range sink.Requests() {
		if r.Status < 200 || r.Status > 299 || r.GaveUp {
			continue
		}
		for i := range runs {
			if r.At.After(cuts[i]) && r.At.Before(cuts[i+1]) && before[i][r.Key] > 0 {
				runs[i].duplicates++
			}
		}
	}
	return runs
}

// reportCrashes logs the runs and checks them: the broker never took a
// message as finished before the sink had it, a restart repeats only what
// the broker did not have as finished, and nothing is lost. documented is
// the bound docs/guarantees.md gives for duplicates after a crash; exceeding it is
// logged, not failed: what a kill leaves uncommitted also depends on how
// far the life before it got (see docs/reliability.md).
func reportCrashes(t *testing.T, runs []crashRun, sink *sinktest.Sink, n, documented int) {
	t.Helper()
	delivered, answers := sink.Delivered()
	total, most := 0, 0
	for i, r := range runs {
		t.Logf("kill %2d after %5v: %3d delivered, %3d finished at the broker, %2d duplicates after the restart",
			i+1, r.killedAfter.Round(time.Millisecond), r.delivered, r.finished, r.duplicates)
		total += r.duplicates
		most = max(most, r.duplicates)
		if len(r.early) > 0 {
			t.Errorf("kill %d: the broker had %d messages as finished that the sink never answered 2xx: %v", i+1, len(r.early), r.early[:min(10, len(r.early))])
		}
		if unfinished := r.delivered - r.finished; r.duplicates > unfinished {
			t.Errorf("kill %d: %d duplicates; want at most the %d delivered but not finished at the broker", i+1, r.duplicates, unfinished)
		}
	}
	if most > documented {
		t.Logf("NOTE: most duplicates after one kill = %d, above the documented in-flight + uncommitted window (%d)", most, documented)
	}
	lost := n - len(delivered)
	t.Logf("%d kills, %d messages: %d lost, %d delivered, %d duplicate deliveries (%d caused by the kills), %d requests",
		len(runs), n, lost, len(delivered), answers-len(delivered), total, sink.RequestCount())
	if lost != 0 {
		t.Errorf("%d of %d messages lost after %d SIGKILLs; want 0", lost, n, len(runs))
	}
	if len(runs) < 10 {
		t.Errorf("only %d kills happened under load; want 10", len(runs))
	}
}

func TestCrashSIGKILLTenTimesLosesNothing(t *testing.T) {
	const n, kills, limit, inFlight = 500, 10, 100, 8
	eachBroker(t, n, func(t *testing.T, f fixture) {
		sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action { return sinktest.Action{Delay: 5 * time.Millisecond} })
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Source: f.source,
			Rate:   fmt.Sprintf("{limit: %d}", limit),
			Sink:   fmt.Sprintf(`{http: {url: "%s", max_in_flight: %d, timeout: 2s}}`, sink.URL, inFlight),
		}.YAML())
		runs := crashLoop(t, config, sink, n, kills, f)
		// docs/guarantees.md's bound: what was in flight, plus, for Kafka, what
		// finished since the last commit (limit × commit_interval), for
		// JetStream the acks not yet published (limit × 50 ms, the
		// source's natsAckEvery).
		documented := inFlight
		switch f.kind {
		case "kafka":
			documented += int(limit * fixtureCommitInterval.Seconds())
		case "jetstream":
			documented += limit * 50 / 1000
		}
		reportCrashes(t, runs, sink, n, documented)
	})
}
