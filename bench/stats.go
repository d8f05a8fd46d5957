package main

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
)

func sortTimes(ts []time.Time) {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
}

// between returns the sorted times in [from, to); nil for nil.
func between(ts []time.Time, from, to time.Time) []time.Time {
	i, _ := slices.BinarySearchFunc(ts, from, func(a, b time.Time) int { return a.Compare(b) })
	j, _ := slices.BinarySearchFunc(ts, to, func(a, b time.Time) int { return a.Compare(b) })
	return ts[i:j]
}

// pacedRate is the rate of evenly paced arrivals: (n-1) intervals over the
// time from the first to the last.
func pacedRate(ts []time.Time) float64 {
	if len(ts) < 2 {
		return 0
	}
	return float64(len(ts)-1) / ts[len(ts)-1].Sub(ts[0]).Seconds()
}

// Timing is how the arrivals of a window at a sink were spread (in the
// peers section, by one of the sink's clocks: when its handler ran, or
// when the bytes reached its host).
type Timing struct {
	// Rate is (n-1)/(t_n - t_1) over the window's arrivals, and RateErrPct
	// its error against the limit.
	Rate       float64 `json:"rate"`
	RateErrPct float64 `json:"rate_err_pct"`
	// Max100ms is the most arrivals in any 100 ms of the window.
	Max100ms int `json:"max_per_100ms"`
	// JitterP50 and JitterP99 are quantiles of |gap - 1/limit| between
	// consecutive arrivals of the window, in microseconds.
	JitterP50 float64 `json:"jitter_p50_us"`
	JitterP99 float64 `json:"jitter_p99_us"`
}

// timing is the timing of the sorted arrivals st against limit.
func timing(limit float64, st []time.Time) Timing {
	t := Timing{Rate: pacedRate(st)}
	t.RateErrPct = 100 * (t.Rate - limit) / limit
	t.Max100ms = window.Most(st, 100*time.Millisecond)
	t.JitterP50, t.JitterP99 = jitter(st, time.Duration(float64(time.Second)/limit))
	return t
}

// jitter returns the p50 and p99 of |gap - interval| over consecutive
// arrivals, in microseconds.
func jitter(ts []time.Time, interval time.Duration) (p50, p99 float64) {
	if len(ts) < 2 {
		return 0, 0
	}
	dev := make([]float64, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		dev[i-1] = math.Abs(float64(ts[i].Sub(ts[i-1])-interval)) / 1e3
	}
	slices.Sort(dev)
	return quantile(dev, 0.50), quantile(dev, 0.99)
}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// perMessage is d in microseconds per message, over n messages; 0 when
// there were none.
func perMessage(d time.Duration, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

// medianOf is the median of f over xs.
func medianOf[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return median(vs)
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchRuns is what one benchmark of `go test -bench` output reported:
// every value of each unit, over its runs.
type benchRuns struct {
	name   string
	values map[string][]float64
}

// parseBenchmarks reads `go test -bench` output and returns its
// benchmarks in order of first appearance, each named without its
// Benchmark prefix and -GOMAXPROCS suffix.
func parseBenchmarks(out string) []*benchRuns {
	var list []*benchRuns
	byName := map[string]*benchRuns{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		r := byName[name]
		if r == nil {
			r = &benchRuns{name: name, values: map[string][]float64{}}
			byName[name] = r
			list = append(list, r)
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				r.values[f[i+1]] = append(r.values[f[i+1]], v)
			}
		}
	}
	return list
}

// LimiterBench is one sub-benchmark's median over -count runs.
type LimiterBench struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	NsMin       float64 `json:"ns_per_op_min"`
	NsMax       float64 `json:"ns_per_op_max"`
	AllocsPerOp float64 `json:"allocs_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	Runs        int     `json:"runs"`
}

// limiterBenchmarks are the medians and the range of ns/op of the
// benchmarks that report it.
func limiterBenchmarks(list []*benchRuns) []LimiterBench {
	var out []LimiterBench
	for _, r := range list {
		if ns := r.values["ns/op"]; len(ns) > 0 {
			out = append(out, LimiterBench{Name: r.name, NsPerOp: median(ns), NsMin: slices.Min(ns), NsMax: slices.Max(ns),
				AllocsPerOp: median(r.values["allocs/op"]), BytesPerOp: median(r.values["B/op"]), Runs: len(ns)})
		}
	}
	return out
}

// named is a figure that a table or a goal looks up by its name.
type named interface{ name() string }

// find returns the element of xs named name.
func find[T named](xs []T, name string) (T, bool) {
	for _, x := range xs {
		if x.name() == name {
			return x, true
		}
	}
	var zero T
	return zero, false
}

func (l LimiterBench) name() string   { return l.Name }
func (r DestinationRun) name() string { return r.Name }
func (p PeerParty) name() string      { return p.Name }
func (r PushbackRun) name() string    { return r.Name }

// runsOf is how many runs the first of l had.
func runsOf[T any](l []T, runs func(T) int) int {
	if len(l) == 0 {
		return 0
	}
	return runs(l[0])
}
