package tuning

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// OneProcRate is the sum of the pipelines' limits, in requests per second,
// up to which the procs knob runs the process's Go code on one P
// (GOMAXPROCS 1).
//
// At such rates a message is a few hundred microseconds of CPU spread over
// a dozen wake-ups (the departure, the request, the answer, the ack), and
// with a second P idle each hand-over between goroutines wakes another
// thread to look for work, which finds none and sleeps again; on one P the
// hand-overs stay on one thread. A departure is then never slept holding
// the P (see Alarms), which at higher rates saves more than one P
// does. docs/tuning.md has the measurements behind the bound.
const OneProcRate = 500

// Procs sets GOMAXPROCS from the sum of the pipelines' limits, each time
// it changes (the config as started, a reload, a rate set through the admin
// API): 1 up to OneProcRate, above it the runtime's default (the CPUs the
// process may use). With the procs knob off, or GOMAXPROCS set in the
// environment (the operator's choice), it never changes GOMAXPROCS.
type Procs struct {
	log   *slog.Logger
	fixed bool // the knob is off, or GOMAXPROCS is set in the environment

	mu  sync.Mutex
	one bool // GOMAXPROCS is 1 because of Set
}

// NewProcs returns the GOMAXPROCS policy of k; it logs each change to
// log.
func (k Knobs) NewProcs(log *slog.Logger) *Procs {
	fixed := !k.Has(KnobProcs) || os.Getenv("GOMAXPROCS") != "" // the runtime ignores an empty one too
	return &Procs{log: log, fixed: fixed}
}

// Set puts the GOMAXPROCS for limits summing to total in force, and logs
// a change.
func (p *Procs) Set(total float64) {
	if p.fixed {
		return
	}
	one := total <= OneProcRate
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
		"total_limit", total, "one_p_up_to", OneProcRate)
}
