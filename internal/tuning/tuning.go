// Package tuning is everything shaper does to bend the Go runtime, behind
// one switch. A paced daemon is idle between departures, and at hundreds
// of departures a second most of its CPU is waking up and handing a
// message from one goroutine to the next; four knobs cut that cost:
//
//   - clock: the pipelines' departures wait on a timerfd in the network
//     poller, and with GOMAXPROCS above 1 sleep their last stretch in the
//     kernel holding the P, with a timer slack of 1 ns (Alarms);
//   - procs: GOMAXPROCS is 1 while the pipelines' limits sum to at most
//     OneProcRate (Procs);
//   - heap: the collector lets the heap grow to HeapFloor before it runs
//     (StartHeapFloor);
//   - conn: the HTTP sink's own client and the NATS connections read and
//     write with system calls the runtime is not told of (Wrap).
//
// Each knob is on unless turned off: `tuning: off` in the config file, or
// SHAPER_TUNING in the environment, which wins over the file (Resolve).
// The program resolves the knobs once and hands the Knobs value to what it
// builds (k.NewAlarms, k.NewProcs, k.StartHeapFloor, k.Wrap); the package
// keeps no state of its own.
// With a knob off the code takes the plain path: Go timers, GOMAXPROCS and
// GOGC left to the runtime (and the environment), the net.Conn as dialled.
// What each knob does, why, and the figures that justify it are in
// docs/tuning.md; the bench rows per knob are in docs/benchmarks.md.
//
// The core (package shaper) knows none of this: it runs on the shaper.Clock
// its Parts give it, and a sink writes its bytes as it likes.
package tuning

import (
	"fmt"
	"os"
	"strings"
)

// Knobs is a set of knobs, each one bit.
type Knobs uint8

// The knobs.
const (
	KnobClock Knobs = 1 << iota // departures on a timerfd, the last stretch holding the P
	KnobProcs                   // GOMAXPROCS 1 up to OneProcRate
	KnobHeap                    // the heap floor
	KnobConn                    // raw reads and writes

	// All is every knob: tuning on.
	All = KnobClock | KnobProcs | KnobHeap | KnobConn
)

// knobNames are the knobs' names, as SHAPER_TUNING=off:NAME,... takes
// them, in the order of the constants.
var knobNames = []struct {
	k    Knobs
	name string
}{{KnobClock, "clock"}, {KnobProcs, "procs"}, {KnobHeap, "heap"}, {KnobConn, "conn"}}

// Has reports whether every knob of x is in k.
func (k Knobs) Has(x Knobs) bool { return k&x == x }

// String is "on" for every knob, "off" for none, and otherwise the
// SHAPER_TUNING value that gives k: "off:" and the knobs off.
func (k Knobs) String() string {
	switch k {
	case All:
		return On
	case 0:
		return Off
	}
	var off []string
	for _, n := range knobNames {
		if !k.Has(n.k) {
			off = append(off, n.name)
		}
	}
	return Off + ":" + strings.Join(off, ",")
}

// The values of the config key tuning and of SHAPER_TUNING.
const (
	On  = "on"
	Off = "off"
	// EnvVar names the environment variable that wins over the config
	// file's tuning: on, off, or off:KNOB,... (only those off).
	EnvVar = "SHAPER_TUNING"
)

// ParseConfig returns the knobs of the config key tuning: every one for
// "on" or "" (the default), none for "off".
func ParseConfig(v string) (Knobs, error) {
	switch v {
	case "", On:
		return All, nil
	case Off:
		return 0, nil
	}
	return 0, fmt.Errorf("must be %s or %s, got %q", On, Off, v)
}

// parseEnv returns the knobs of a SHAPER_TUNING value: on, off, or
// off:KNOB[,KNOB...] for every knob but those.
func parseEnv(v string) (Knobs, error) {
	names, ok := strings.CutPrefix(v, Off+":")
	if !ok {
		k, err := ParseConfig(v)
		if err != nil || v == "" {
			return 0, fmt.Errorf("%s: want %s, %s or %s:KNOB,... (knobs: %s), got %q", EnvVar, On, Off, Off, knobList(), v)
		}
		return k, nil
	}
	k := All
	for name := range strings.SplitSeq(names, ",") {
		i := knobIndex(strings.TrimSpace(name))
		if i < 0 {
			return 0, fmt.Errorf("%s: no knob %q in %q (knobs: %s)", EnvVar, name, v, knobList())
		}
		k &^= knobNames[i].k
	}
	return k, nil
}

func knobIndex(name string) int {
	for i, n := range knobNames {
		if n.name == name {
			return i
		}
	}
	return -1
}

func knobList() string {
	var names []string
	for _, n := range knobNames {
		names = append(names, n.name)
	}
	return strings.Join(names, ", ")
}

// Resolve returns the knobs in force for the config key tuning set to
// configured: SHAPER_TUNING when it is set (it wins over the file), else
// configured. An invalid value of either is an error.
func Resolve(configured string) (Knobs, error) {
	if v, ok := os.LookupEnv(EnvVar); ok {
		return parseEnv(v)
	}
	return ParseConfig(configured)
}

// Report says, for each knob, what is in force: the path k takes, for the
// daemon's startup log and for tests.
func (k Knobs) Report() map[string]string {
	pick := func(x Knobs, on, off string) string {
		if k.Has(x) {
			return on
		}
		return off
	}
	return map[string]string{
		"clock": pick(KnobClock, clockTuned, "Go timers"),
		"procs": pick(KnobProcs, fmt.Sprintf("GOMAXPROCS 1 up to %d/s", OneProcRate), "GOMAXPROCS left to the runtime"),
		"heap":  pick(KnobHeap, fmt.Sprintf("heap floor %d MiB", HeapFloor>>20), "GOGC left to the runtime"),
		"conn":  pick(KnobConn, connTuned, "net.Conn as dialled"),
	}
}
