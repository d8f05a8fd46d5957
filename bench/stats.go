package main

import (
	"math"
	"slices"
	"time"
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
