package main

import (
	"fmt"
	"math"
	"strings"
)

// The pictures are hand-written SVG in one style: panels stacked on one
// time axis, a title and a legend above them, each panel with its label
// on the left and a summary on the right.
const (
	svgWidth    = 760
	svgLeft     = 64
	svgRight    = 16
	svgTop      = 76
	svgPanelH   = 118
	svgPanelGap = 34
	svgBottom   = 44
)

// svg is a picture being written: n panels of height panelH, stacked.
type svg struct {
	strings.Builder
	n, panelH int
}

func (s *svg) f(format string, args ...any) { fmt.Fprintf(s, format+"\n", args...) }

// newSVG opens a picture of n panels of height panelH, with its title.
func newSVG(n, panelH int, title string) *svg {
	s := &svg{n: n, panelH: panelH}
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`,
		svgWidth, s.height(), svgWidth, s.height())
	s.f(`<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	s.f(`<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`, svgLeft, title)
	return s
}

// span is the height of the panels and the gaps between them.
func (s *svg) span() int { return s.n*s.panelH + (s.n-1)*svgPanelGap }

// height is the picture's height.
func (s *svg) height() int { return svgTop + s.span() + svgBottom }

// top and bottom are the edges of panel i.
func (s *svg) top(i int) float64    { return float64(svgTop + i*(s.panelH+svgPanelGap)) }
func (s *svg) bottom(i int) float64 { return s.top(i) + float64(s.panelH) }

// curve writes a line of the figures through points, in colour.
func (s *svg) curve(colour string, points ...[2]float64) {
	s.f(`<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`, path(points...), colour)
}

// legend writes a line of the legend in style at x, and its text.
func (s *svg) legend(x float64, style, text string) {
	s.f(`<line x1="%.0f" y1="38" x2="%.0f" y2="38" %s/><text x="%.0f" y="42">%s</text>`, x, x+18, style, x+22, text)
}

// panel writes the label and summary of panel i above its top, whose
// right edge is right.
func (s *svg) panel(i int, right float64, colour, label, summary string) {
	top := s.top(i)
	s.f(`<text x="%d" y="%.0f" font-size="12" font-weight="bold" fill="%s">%s</text>`, svgLeft, top-6, colour, xmlEscape(label))
	s.f(`<text x="%.0f" y="%.0f" text-anchor="end" fill="#555">%s</text>`, right, top-6, xmlEscape(summary))
}

// axes writes the axes of panel i.
func (s *svg) axes(i int, right float64) {
	top, bottom := s.top(i), s.bottom(i)
	s.f(`<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`, svgLeft, bottom, right, bottom)
	s.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`, svgLeft, top, svgLeft, bottom)
}

// grid writes a grid line at y up to right, labelled on the left.
func (s *svg) grid(y, right float64, fill, label string) {
	s.f(`<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e6e6e6"/>`, svgLeft, y, right, y)
	s.f(`<text x="%d" y="%.1f" text-anchor="end"%s>%s</text>`, svgLeft-6, y+4, fill, label)
}

// ticks writes the time axis under panel i from 0 to total seconds every
// step, with tick marks when marked, and their labels under the last
// panel, dy below it.
func (s *svg) ticks(x func(float64) float64, i int, total, step, dy float64, marked bool) {
	bottom, last := s.bottom(i), i == s.n-1
	for t := 0.0; t <= total; t += step {
		if marked {
			s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`, x(t), bottom, x(t), bottom+4)
		}
		if last {
			s.f(`<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`, x(t), bottom+dy, t)
		}
	}
}

// foot writes the axes' titles and closes the picture.
func (s *svg) foot(dy int, xTitle, yTitle string) string {
	s.f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, svgLeft+float64(svgWidth-svgLeft-svgRight)/2, s.height()-dy, xTitle)
	s.f(`<text transform="translate(14 %d) rotate(-90)" text-anchor="middle">%s</text>`, svgTop+s.span()/2, yTitle)
	s.WriteString("</svg>\n")
	return s.String()
}

// path is an SVG path through points, a move to the first and a line to
// each of the others.
func path(points ...[2]float64) string {
	var b strings.Builder
	for i, p := range points {
		fmt.Fprintf(&b, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], p[0], p[1])
	}
	return strings.TrimSpace(b.String())
}

var panelColours = []string{"#1f77b4", "#e07b00", "#c62828"}

// shapingSVG is docs/shaping.svg: for each limiter, the input (grey bars)
// and what the sink received (a coloured step line), the limit dashed, in
// requests per second measured over bins of BinMs.
func shapingSVG(sec *PictureSection) string {
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

	s := newSVG(len(sec.Panels), svgPanelH, fmt.Sprintf("A burst of %d messages, shaped to %g requests/s", sec.Burst, sec.Limit))
	lx := float64(svgLeft)
	s.f(`<rect x="%.0f" y="33" width="12" height="9" fill="#b0b0b0"/><text x="%.0f" y="42">input: published to the broker</text>`, lx, lx+16)
	s.legend(lx+200, `stroke="#333" stroke-width="2"`, "delivered to the HTTP sink")
	s.legend(lx+380, `stroke="#333" stroke-dasharray="4 3"`, fmt.Sprintf("limit (%g/s)", sec.Limit))
	s.f(`<text x="%.0f" y="42" fill="#555">rates over %d ms bins</text>`, lx+480, sec.BinMs)

	for i, p := range sec.Panels {
		top, bottom := s.top(i), s.bottom(i)
		y := func(v float64) float64 { return bottom - svgPanelH*math.Min(v, yMax)/yMax }
		colour := panelColours[i%len(panelColours)]
		s.panel(i, svgWidth-svgRight, colour, p.Label, fmt.Sprintf("most in any 100 ms: %d · done in %.1f s", p.Max100ms, p.Took))
		for _, v := range []float64{0, 500, 1000} {
			s.grid(y(v), svgWidth-svgRight, "", fmt.Sprintf("%g/s", v))
		}
		// Input bars, clipped at the top with the peak written beside.
		peak := 0
		for j, c := range p.In {
			if c > 0 {
				peak = max(peak, c)
				s.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#b0b0b0"/>`,
					x(float64(j)*binSec), y(perSec(c)), math.Max(x(binSec)-x(0), 1), bottom-y(perSec(c)))
			}
		}
		if perSec(peak) > yMax {
			first, sum, bins := 0, 0, 0
			for first < len(p.In) && p.In[first] == 0 {
				first++
			}
			for _, c := range p.In {
				sum += c
				bins += min(c, 1)
			}
			ms := sec.BinMs * bins
			s.f(`<text x="%.1f" y="%.1f" fill="#666">▲ input: %s messages in %d ms, %s/s (off the scale)</text>`,
				x(float64(first+1)*binSec)+4, top+11, thousands(sum), ms, thousands(sum*1000/ms))
		}
		// The limit, under the delivered line that should sit on it.
		s.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`, svgLeft, y(sec.Limit), svgWidth-svgRight, y(sec.Limit))
		steps := [][2]float64{{x(0), y(0)}}
		for j, c := range p.Out {
			steps = append(steps, [2]float64{x(float64(j) * binSec), y(perSec(c))}, [2]float64{x(float64(j+1) * binSec), y(perSec(c))})
		}
		s.curve(colour, steps...)
		s.axes(i, svgWidth-svgRight)
		s.ticks(x, i, totalSec, 2, 16, true)
	}
	return s.foot(10, "seconds", "requests per second")
}

// pushbackPanelH is the height of a panel of pushback.svg and lanes.svg.
const pushbackPanelH = 150

var pushbackColours = []string{"#1f77b4", "#c62828"}

// pushbackSVG is docs/pushback.svg: for each run, the sink's capacity (a
// grey step), the limit in force (dashed), the rate delivered over the
// second before each sample (a coloured line) and a red tick under the
// axis for each sample with 429s.
func pushbackSVG(sec *PushbackSection) string {
	plotW := float64(svgWidth - svgLeft - svgRight)
	x := func(t float64) float64 { return svgLeft + plotW*t/sec.Seconds }
	yMax := math.Ceil(sec.Limit*1.2/10) * 10

	s := newSVG(len(sec.Runs), pushbackPanelH, fmt.Sprintf("A sink whose capacity steps %s, behind rate.limit %g", scheduleText(sec.Steps), sec.Limit))
	lx := float64(svgLeft)
	s.legend(lx, `stroke="#b0b0b0" stroke-width="5"`, "sink capacity (per sliding second)")
	s.legend(lx+210, `stroke="#333" stroke-dasharray="4 3"`, "limit in force")
	s.legend(lx+320, `stroke="#333" stroke-width="2"`, "delivered (2xx over the last 1 s)")
	s.f(`<line x1="%.0f" y1="34" x2="%.0f" y2="42" stroke="#c62828"/><text x="%.0f" y="42">a 429 (under the axis)</text>`, lx+535, lx+535, lx+541)

	tick := 10.0
	if sec.Seconds < 60 {
		tick = 5
	}
	for i, run := range sec.Runs {
		bottom := s.bottom(i)
		y := func(v float64) float64 { return bottom - pushbackPanelH*math.Min(v, yMax)/yMax }
		s.panel(i, svgWidth-svgRight, pushbackColours[i%len(pushbackColours)], run.Label,
			fmt.Sprintf("429s: %.1f%% of requests, %.1f%% in steady state", run.ThrottledPct, run.SteadyThrottledPct))
		for v := 0.0; v <= yMax; v += 50 {
			s.grid(y(v), svgWidth-svgRight, "", fmt.Sprintf("%g/s", v))
		}
		var capacity, limit, delivered [][2]float64
		for j, st := range sec.Steps {
			next := sec.Seconds
			if j+1 < len(sec.Steps) {
				next = sec.Steps[j+1].At
			}
			capacity = append(capacity, [2]float64{x(st.At), y(float64(st.Capacity))}, [2]float64{x(next), y(float64(st.Capacity))})
		}
		for _, sm := range run.Samples {
			limit = append(limit, [2]float64{x(sm.T), y(sm.Limit)})
			delivered = append(delivered, [2]float64{x(sm.T), y(sm.Delivered)})
		}
		s.f(`<path d="%s" fill="none" stroke="#b0b0b0" stroke-width="5" stroke-linejoin="round"/>`, path(capacity...))
		s.f(`<path d="%s" fill="none" stroke="#333" stroke-dasharray="4 3" stroke-width="1.2"/>`, path(limit...))
		s.curve(pushbackColours[i%len(pushbackColours)], delivered...)
		for _, sm := range run.Samples {
			if sm.Throttled > 0 {
				s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c62828"/>`, x(sm.T), bottom+2, x(sm.T), bottom+8)
			}
		}
		s.axes(i, svgWidth-svgRight)
		s.ticks(x, i, sec.Seconds, tick, 20, false)
	}
	return s.foot(8, "seconds from the sink's first request", "requests per second")
}

// lanesRight is the room lanes.svg keeps for its right-hand axis.
const lanesRight = 60

var lanesColourA, lanesColourB = "#1f77b4", "#e07b00"

// lanesSVG is docs/lanes.svg: for each run, the A delivered so far (left
// axis) and the B delivered so far (right axis, of the B published), and a
// dashed line where the last B arrived.
func lanesSVG(tk *LaneTwoKeys) string {
	plotW := float64(svgWidth - svgLeft - lanesRight)
	right := float64(svgWidth - lanesRight)
	total := 1.0
	for _, r := range tk.Runs {
		total = max(total, r.Seconds)
	}
	x := func(t float64) float64 { return svgLeft + plotW*math.Min(t, total)/total }
	stepA, tick := 500, 2.0
	if tk.A < 1000 {
		stepA = 100
	}
	if total > 30 {
		tick = 5
	}

	s := newSVG(len(tk.Runs), pushbackPanelH, fmt.Sprintf("Two merchants at %g requests/s: %s callbacks of A in the stream, then %d of B", tk.Limit, thousands(tk.A), tk.B))
	lx := float64(svgLeft)
	s.legend(lx, fmt.Sprintf(`stroke="%s" stroke-width="2"`, lanesColourA), "A delivered (left axis)")
	s.legend(lx+160, fmt.Sprintf(`stroke="%s" stroke-width="2"`, lanesColourB), fmt.Sprintf("B delivered, of %d (right axis)", tk.B))
	s.f(`<line x1="%.0f" y1="32" x2="%.0f" y2="44" stroke="%s" stroke-dasharray="3 2"/><text x="%.0f" y="42">the last B delivered</text>`, lx+360, lx+360, lanesColourB, lx+366)

	for i, run := range tk.Runs {
		top, bottom := s.top(i), s.bottom(i)
		yA := func(v int) float64 { return bottom - pushbackPanelH*float64(v)/float64(max(tk.A, 1)) }
		yB := func(v int) float64 { return bottom - pushbackPanelH*float64(v)/float64(max(tk.B, 1)) }
		s.panel(i, right, "#333", run.Label, twoKeysSummary(tk, run))
		for v := 0; v <= tk.A; v += stepA {
			s.grid(yA(v), right, fmt.Sprintf(` fill="%s"`, lanesColourA), thousands(v))
		}
		for _, v := range []int{0, tk.B / 2, tk.B} {
			s.f(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`, right, yB(v), right+4, yB(v))
			s.f(`<text x="%.0f" y="%.1f" fill="%s">%d</text>`, right+7, yB(v)+4, lanesColourB, v)
		}
		// A: cumulative at the end of each bin; B: a step at each arrival.
		binSec := float64(tk.BinMs) / 1000
		a, b := [][2]float64{{x(0), yA(0)}}, [][2]float64{{x(0), yB(0)}}
		for j, c := range run.ACumulative {
			a = append(a, [2]float64{x(float64(j+1) * binSec), yA(c)})
		}
		for j, t := range run.BSeconds {
			b = append(b, [2]float64{x(t), yB(j)}, [2]float64{x(t), yB(j + 1)})
		}
		b = append(b, [2]float64{x(run.Seconds), yB(len(run.BSeconds))})
		s.curve(lanesColourA, a...)
		s.curve(lanesColourB, b...)
		if run.LastB >= 0 {
			lx := x(run.LastB)
			s.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="3 2"/>`, lx, top, lx, bottom, lanesColourB)
			// Beside the line, where the curves are not: to its right
			// halfway up when it is early, to its left near the bottom when
			// late (A is high by then, and B still at 0 before it).
			anchor, dx, ly := "start", 4.0, top+pushbackPanelH/2
			if lx > svgLeft+plotW/2 {
				anchor, dx, ly = "end", -4, bottom-8
			}
			s.f(`<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke">last B: %s s</text>`,
				lx+dx, ly, anchor, lanesColourB, secondsText(run.LastB))
		}
		s.axes(i, right)
		s.f(`<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#333"/>`, right, top, right, bottom)
		s.ticks(x, i, total, tick, 16, true)
	}
	mid := svgTop + s.span()/2
	s.f(`<text x="%.1f" y="%d" text-anchor="middle">seconds from the first delivery</text>`, svgLeft+plotW/2, s.height()-10)
	s.f(`<text transform="translate(14 %d) rotate(-90)" text-anchor="middle" fill="%s">A delivered</text>`, mid, lanesColourA)
	s.f(`<text transform="translate(%d %d) rotate(90)" text-anchor="middle" fill="%s">B delivered (of %d)</text>`, svgWidth-14, mid, lanesColourB, tk.B)
	s.WriteString("</svg>\n")
	return s.String()
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
