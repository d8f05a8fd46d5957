package main

import (
	"log/slog"
	"os"
	"runtime"
	"sync"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/shaper"
)

// oneProcRate is the sum of the pipelines' limits, in requests per second,
// up to which the process runs its Go code on one P (GOMAXPROCS 1).
//
// At such rates a message is a few hundred microseconds of CPU spread over
// a dozen wake-ups (the departure, the request, the answer, the ack), and
// with a second P idle each hand-over between goroutines wakes another
// thread to look for work, which finds none and sleeps again. On one P the
// hand-overs stay on one thread: at 100/s JetStream → HTTP, measured 7.1
// context switches per message against 11.2 with two Ps. A departure is
// then never slept holding the P (see shaper.MachineClock), which at 1000/s
// and more saves more than one P does. One P carried 5000/s in the same
// measurement at 40% of a core, ten times this bound.
const oneProcRate = 500

// procs sets GOMAXPROCS from the sum of the pipelines' limits, each time
// it changes (the config as started, a reload, a rate set through the admin
// API): 1 up to oneProcRate, above it the runtime's default (the CPUs the
// process may use). GOMAXPROCS set in the environment is the operator's
// choice, and procs never changes it.
type procs struct {
	log   *slog.Logger
	fixed bool // GOMAXPROCS is set in the environment

	mu  sync.Mutex
	one bool // GOMAXPROCS is 1 because of set
}

func newProcs(log *slog.Logger) *procs {
	return &procs{log: log, fixed: os.Getenv("GOMAXPROCS") != ""} // the runtime ignores an empty one too
}

// set puts the GOMAXPROCS for limits summing to total in force, and logs
// a change.
func (p *procs) set(total float64) {
	if p.fixed {
		return
	}
	one := total <= oneProcRate
	p.mu.Lock()
	defer p.mu.Unlock()
	if one == p.one {
		return
	}
	p.one = one
	if one {
		runtime.GOMAXPROCS(1)
	} else {
		runtime.SetDefaultGOMAXPROCS()
	}
	p.log.Info("GOMAXPROCS set for the pipelines' total rate", "gomaxprocs", runtime.GOMAXPROCS(0),
		"total_limit", total, "one_p_up_to", oneProcRate)
}

// configuredLimit is the sum of the limits cfg's pipelines are set to: a
// reload's, before the fleet has applied it.
func configuredLimit(cfg *config.File) float64 {
	var sum float64
	for _, pc := range cfg.Pipelines {
		sum += pc.Rate.Limit
	}
	return sum
}

// totalLimit is the sum of the limits the pipelines are set to now (an
// admin API call may have changed them).
func totalLimit(pipelines []*shaper.Pipeline) float64 {
	var sum float64
	for _, p := range pipelines {
		sum += p.Status().Limit
	}
	return sum
}
