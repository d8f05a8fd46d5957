package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/internal/window"
	"github.com/shaper-dev/shaper/shaper"
)

// PictureSection is the run behind docs/shaping.svg: one burst into three
// pipelines, each shaping it with a different limiter.
type PictureSection struct {
	Burst  int            `json:"burst"`
	Limit  float64        `json:"limit"`
	BinMs  int            `json:"bin_ms"`
	Load   Load           `json:"load"`
	Panels []PicturePanel `json:"panels"`
}

// PicturePanel is one limiter's input and output, binned.
type PicturePanel struct {
	Limiter string `json:"limiter"`
	Label   string `json:"label"`
	// In and Out are messages published and delivered per bin, from the
	// start of the picture.
	In  []int `json:"in"`
	Out []int `json:"out"`
	// Max100ms is the most deliveries in any 100ms window; Took is the
	// time from the burst to the last delivery.
	Max100ms int     `json:"max_per_100ms"`
	Took     float64 `json:"seconds_to_deliver"`
}

func runPicture(ctx context.Context, o *options, env *environment) (*PictureSection, error) {
	probe := startLoadProbe()
	const limit, tokenBurst = 100.0, 100
	burst := 2000
	if o.quick {
		burst = 500
	}
	sec := &PictureSection{Burst: burst, Limit: limit, BinMs: 100}
	panels := []struct{ impl, label string }{
		{implLeaky, "shaper, leaky mode"},
		{implToken, fmt.Sprintf("shaper, token mode (burst %d)", tokenBurst)},
		{implFixed, "fixed-window counter (100 per 1 s window)"},
	}
	type lane struct {
		name string
		sink *sink
		run  *running
		in   []time.Time
	}
	lanes := make([]*lane, len(panels))
	var fixed *fixedWindow
	defer func() {
		for _, l := range lanes {
			if l == nil {
				continue
			}
			if l.run != nil {
				_ = l.run.stop() // the figures are taken; a stop error changes nothing
			}
			l.sink.close()
			env.js.deleteStream(context.WithoutCancel(ctx), l.name)
		}
	}()
	for i, p := range panels {
		l := &lane{name: fmt.Sprintf("PIC%d", i), in: make([]time.Time, burst)}
		lanes[i] = l
		if err := env.js.stream(ctx, l.name); err != nil {
			return nil, err
		}
		s, err := startSink(true)
		if err != nil {
			return nil, err
		}
		l.sink = s
		spec := pipelineSpec{
			name: l.name, source: env.js.sourceConfig(l.name, "shaper-pic"), sinkURL: s.URL,
			rate:     shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: limit},
			capacity: 1000, maxInFlight: 8,
		}
		switch p.impl {
		case implToken:
			b := tokenBurst
			spec.rate.Mode, spec.rate.Burst = shaper.ModeToken, &b
		case implFixed:
			fixed = newFixedWindow(limit, time.Now())
			spec.limiter = fixed
		}
		if l.run, err = startPipeline(ctx, spec); err != nil {
			return nil, err
		}
	}
	// Bins, and the fixed window's edges, count from start. The pipelines
	// idle for a second (an idle bucket, a full token bucket), then the
	// burst arrives at all three at once, just after the fixed window's
	// edge at 1s.
	start := time.Now()
	fixed.setOrigin(start)
	time.Sleep(time.Second)
	progress("picture: a burst of %d into three pipelines at %v/s", burst, limit)
	var wg sync.WaitGroup
	errs := make([]error, len(lanes))
	for i, l := range lanes {
		wg.Go(func() { errs[i] = env.js.publish(ctx, l.name, 0, burst, l.in) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	timeout := time.Duration(float64(burst)/limit*float64(time.Second)) + 30*time.Second
	for _, l := range lanes {
		if !l.sink.waitCount(ctx, int64(burst), timeout) {
			return nil, fmt.Errorf("picture %s: %d of %d delivered within %v", l.name, l.sink.count.Load(), burst, timeout)
		}
	}
	time.Sleep(time.Second) // a second of quiet after the last delivery, for the picture

	end := time.Now()
	bin := time.Duration(sec.BinMs) * time.Millisecond
	nbins := int(math.Ceil(float64(end.Sub(start)) / float64(bin)))
	for i, l := range lanes {
		arr := l.sink.arrivals()
		p := PicturePanel{
			Limiter: panels[i].impl, Label: panels[i].label,
			In: binCounts(l.in, start, bin, nbins), Out: binCounts(arr, start, bin, nbins),
			Max100ms: window.Most(arr, 100*time.Millisecond),
			Took:     arr[len(arr)-1].Sub(l.in[0]).Seconds(),
		}
		progress("picture: %-40s max/100ms %3d, all delivered %.1fs after the burst", p.Label, p.Max100ms, p.Took)
		sec.Panels = append(sec.Panels, p)
	}
	sec.Load = probe.stop()
	return sec, nil
}

// binCounts counts ts in nbins consecutive bins of width bin from start.
func binCounts(ts []time.Time, start time.Time, bin time.Duration, nbins int) []int {
	out := make([]int, nbins)
	for _, t := range ts {
		i := int(t.Sub(start) / bin)
		if i >= 0 && i < nbins {
			out[i]++
		}
	}
	return out
}

// The picture, hand-written SVG: three panels stacked on one time axis,
// each with the input (grey bars) and what the sink received (a coloured
// step line), the limit dashed, in requests per second measured over
// bins of BinMs.
const (
	svgWidth    = 760
	svgLeft     = 64
	svgRight    = 16
	svgTop      = 76
	svgPanelH   = 118
	svgPanelGap = 34
	svgBottom   = 44
)

var panelColours = []string{"#1f77b4", "#e07b00", "#c62828"}

func renderSVG(sec *PictureSection) string {
	var b strings.Builder
	n := len(sec.Panels)
	height := svgTop + n*svgPanelH + (n-1)*svgPanelGap + svgBottom
	plotW := float64(svgWidth - svgLeft - svgRight)
	bins := 0
	for _, p := range sec.Panels {
		bins = max(bins, len(p.Out))
	}
	binSec := float64(sec.BinMs) / 1000
	totalSec := float64(bins) * binSec
	x := func(sec float64) float64 { return svgLeft + plotW*sec/totalSec }
	// The y axis is in requests per second; the burst itself (thousands per
	// second) is clipped and labelled.
	yMax := 1200.0
	perSec := func(count int) float64 { return float64(count) / binSec }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">A burst of %d messages, shaped to %g requests/s</text>`+"\n", svgLeft, sec.Burst, sec.Limit)
	// Legend.
	lx := float64(svgLeft)
	fmt.Fprintf(&b, `<rect x="%.0f" y="33" width="12" height="9" fill="#b0b0b0"/><text x="%.0f" y="42">input: published to the broker</text>`+"\n", lx, lx+16)
	lx += 200
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="#333" stroke-width="2"/><text x="%.0f" y="42">delivered to the HTTP sink</text>`+"\n", lx, lx+18, lx+22)
	lx += 180
	fmt.Fprintf(&b, `<line x1="%.0f" y1="38" x2="%.0f" y2="38" stroke="#333" stroke-dasharray="4 3"/><text x="%.0f" y="42">limit (%g/s)</text>`+"\n", lx, lx+18, lx+22, sec.Limit)
	lx += 100
	fmt.Fprintf(&b, `<text x="%.0f" y="42" fill="#555">rates over %d ms bins</text>`+"\n", lx, sec.BinMs)

	for i, p := range sec.Panels {
		top := float64(svgTop + i*(svgPanelH+svgPanelGap))
		bottom := top + svgPanelH
		y := func(v float64) float64 { return bottom - svgPanelH*math.Min(v, yMax)/yMax }
		colour := panelColours[i%len(panelColours)]

		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-size="12" font-weight="bold" fill="%s">%s</text>`+"\n", svgLeft, top-6, colour, xmlEscape(p.Label))
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" fill="#555">most in any 100 ms: %d · done in %.1f s</text>`+"\n", svgWidth-svgRight, top-6, p.Max100ms, p.Took)
		// Grid and y axis.
		for _, v := range []float64{0, 500, 1000} {
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e6e6e6"/>`+"\n", svgLeft, y(v), svgWidth-svgRight, y(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g/s</text>`+"\n", svgLeft-6, y(v)+4, v)
		}
		// Input bars, clipped at the top with the peak written beside.
		peak := 0
		for j, c := range p.In {
			if c == 0 {
				continue
			}
			peak = max(peak, c)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#b0b0b0"/>`+"\n",
				x(float64(j)*binSec), y(perSec(c)), math.Max(x(binSec)-x(0), 1), bottom-y(perSec(c)))
		}
		if perSec(peak) > yMax {
			first := 0
			for first < len(p.In) && p.In[first] == 0 {
				first++
			}
			ms := sec.BinMs * nonZero(p.In)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#666">▲ input: %s messages in %d ms, %s/s (off the scale)</text>`+"\n",
				x(float64(first+1)*binSec)+4, top+11, thousands(sumInts(p.In)), ms, thousands(sumInts(p.In)*1000/ms))
		}
		// The limit, under the delivered line that should sit on it.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`+"\n", svgLeft, y(sec.Limit), svgWidth-svgRight, y(sec.Limit))
		// Delivered: a step line.
		var path strings.Builder
		fmt.Fprintf(&path, "M%.1f,%.1f", x(0), y(0))
		for j, c := range p.Out {
			fmt.Fprintf(&path, " L%.1f,%.1f L%.1f,%.1f", x(float64(j)*binSec), y(perSec(c)), x(float64(j+1)*binSec), y(perSec(c)))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`+"\n", path.String(), colour)
		// Axes.
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, bottom, svgWidth-svgRight, bottom)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", svgLeft, top, svgLeft, bottom)
		for s := 0.0; s <= totalSec; s += 2 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x(s), bottom, x(s), bottom+4)
			if i == n-1 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(s), bottom+16, s)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">seconds</text>`+"\n", svgLeft+plotW/2, height-10)
	fmt.Fprintf(&b, `<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">requests per second</text>`+"\n",
		svgTop+(n*svgPanelH+(n-1)*svgPanelGap)/2)
	b.WriteString("</svg>\n")
	return b.String()
}

// thousands writes n with a thin space between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "\u2009" + s[i:]
	}
	return s
}

func sumInts(vs []int) int {
	s := 0
	for _, v := range vs {
		s += v
	}
	return s
}

func nonZero(vs []int) int {
	n := 0
	for _, v := range vs {
		if v != 0 {
			n++
		}
	}
	return n
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
