package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/shaper"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms ...float64) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m * float64(time.Millisecond)))
	}
	return out
}

func TestMaxInWindowCountsTheBusiestHalfOpenWindow(t *testing.T) {
	tests := []struct {
		name string
		give []time.Time
		w    time.Duration
		want int
	}{
		{"empty", nil, 100 * time.Millisecond, 0},
		{"evenly spaced", at(0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110), 100 * time.Millisecond, 10},
		{"the end is open", at(0, 100), 100 * time.Millisecond, 1},
		{"a cluster later on", at(0, 500, 501, 502, 503, 900), 100 * time.Millisecond, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := window.Most(tt.give, tt.w); got != tt.want {
				t.Errorf("window.Most(%s) = %d; want %d", tt.name, got, tt.want)
			}
		})
	}
}

// reserveBacklog takes n slots the way the pipeline's scheduler does with a
// backlog: it asks Next at the time the previous slot went, and takes the
// slot with Allow at its time.
func reserveBacklog(l shaper.Limiter, from time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	now := from
	for i := range out {
		out[i] = l.Next(now)
		if !l.Allow(out[i]) {
			panic("Allow refused the slot Next told, at its time")
		}
		now = out[i]
	}
	return out
}

func TestFixedWindowSendsEachWindowsCountAtOnceAndTwiceItAcrossAnEdge(t *testing.T) {
	origin := t0
	f := newFixedWindow(10, origin)
	// Start 0.7s into the first window, as the precision run does.
	slots := reserveBacklog(f, origin.Add(700*time.Millisecond), 30)
	for i, s := range slots {
		var want time.Time
		switch {
		case i < 10:
			want = origin.Add(700 * time.Millisecond)
		default:
			want = origin.Add(time.Duration(i/10) * time.Second)
		}
		if !s.Equal(want) {
			t.Fatalf("slot %d = %v; want %v", i, s.Sub(origin), want.Sub(origin))
		}
	}
	if got := window.Most(slots, time.Second); got != 20 {
		t.Errorf("most slots in any 1s window = %d; want 20 (2× the limit across an edge)", got)
	}
}

func TestXRateSpacesABacklogOneIntervalApart(t *testing.T) {
	x := newXRate(100, 1)
	slots := reserveBacklog(x, t0, 5)
	for i := 1; i < len(slots); i++ {
		if gap := slots[i].Sub(slots[i-1]); gap != 10*time.Millisecond {
			t.Errorf("gap %d = %v; want 10ms", i, gap)
		}
	}
}

func TestJitterAndPacedRateOfEvenArrivals(t *testing.T) {
	ts := at(0, 10, 20, 31, 40, 50)
	if got, want := pacedRate(ts), 100.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("pacedRate = %v; want %v", got, want)
	}
	p50, p99 := jitter(ts, 10*time.Millisecond)
	if p50 != 0 || p99 != 1000 {
		t.Errorf("jitter = %v, %v µs; want 0, 1000", p50, p99)
	}
}

func TestWindowRateCountsWholeWindows(t *testing.T) {
	// Bursts of 5 at 0.7s, then at each edge 1s, 2s, 3s, 4s.
	var ts []time.Time
	for _, edge := range []float64{700, 1000, 2000, 3000, 4000} {
		for i := range 5 {
			ts = append(ts, at(edge+float64(i))...)
		}
	}
	// From 1.5s: whole windows [2s, 4s) hold 10.
	if got := windowRate(ts, t0, t0.Add(1500*time.Millisecond)); got != 5 {
		t.Errorf("windowRate = %v; want 5", got)
	}
}

func TestParseBenchmarksTakesTheMedianOfEachSubBenchmark(t *testing.T) {
	out := `goos: linux
BenchmarkReserve/shaper-leaky-2   	1000	 20.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/x-time-rate-2    	1000	 30.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/shaper-leaky-2   	1000	 22.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkReserve/shaper-leaky-2   	1000	 50.0 ns/op	 0 B/op	 0 allocs/op
PASS
`
	got := parseBenchmarks(out)
	if len(got) != 2 || got[0].Name != "Reserve/shaper-leaky" || got[1].Name != "Reserve/x-time-rate" {
		t.Fatalf("parseBenchmarks names = %+v; want Reserve/shaper-leaky, Reserve/x-time-rate", got)
	}
	if l := got[0]; l.NsPerOp != 22 || l.NsMin != 20 || l.NsMax != 50 || l.Runs != 3 {
		t.Errorf("parseBenchmarks(shaper-leaky) = %+v; want median 22, range 20–50, 3 runs", l)
	}
}

func TestRenderSVGIsWellFormedXML(t *testing.T) {
	sec := &PictureSection{Burst: 20, Limit: 100, BinMs: 100, Panels: []PicturePanel{
		{Limiter: implLeaky, Label: "leaky <mode> & co", In: []int{0, 20, 0, 0}, Out: []int{0, 10, 10, 0}, Max100ms: 10, Took: 0.2},
		{Limiter: implFixed, Label: "fixed", In: []int{0, 20, 0, 0}, Out: []int{0, 20, 0, 0}, Max100ms: 20, Took: 0.1},
	}}
	svg := renderSVG(sec)
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("renderSVG: not well-formed XML: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"leaky &lt;mode&gt; &amp; co", "requests per second", "seconds"} {
		if !strings.Contains(svg, want) {
			t.Errorf("renderSVG lacks %q", want)
		}
	}
}

func TestThousandsGroupsDigitsByThree(t *testing.T) {
	tests := []struct {
		give int
		want string
	}{{5, "5"}, {999, "999"}, {2000, "2\u2009000"}, {20000, "20\u2009000"}, {1234567, "1\u2009234\u2009567"}}
	for _, tt := range tests {
		if got := thousands(tt.give); got != tt.want {
			t.Errorf("thousands(%d) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
