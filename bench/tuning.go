package main

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// TuningSection is what each knob of package internal/tuning buys on the
// path users run (docs/tuning.md): a `shaper run` child delivers a
// JetStream backlog to an HTTPS sink, leaky at each limit, with every knob
// on, every knob off, and each knob off alone (SHAPER_TUNING), the rows of
// a limit taken in turn, run after run. The child's CPU is its process CPU
// clock over the window, per message the sink received in it.
type TuningSection struct {
	Common
	// Rows are the SHAPER_TUNING values of the children, the same in
	// every case; each case has a party per row, named and labelled as
	// the row, its ratios to the row with every knob on.
	Rows  []TuningKnobs `json:"rows"`
	Cases []PeerCase    `json:"cases"`
	// Runs is how many times each row ran in each case; WarmupSeconds is
	// how long a run delivered before its window, from the first request
	// at the sink, and WindowSeconds how long the window lasted.
	Runs          int     `json:"runs"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
}

// TuningKnobs is one row of every case: the SHAPER_TUNING of the child.
type TuningKnobs struct {
	Name string `json:"name"`
	Env  string `json:"env"`
}

// tuningRows are the section's rows: every knob on, every one off, and
// each off alone.
var tuningRows = []TuningKnobs{
	{"on", "on"}, {"off", "off"},
	{"clock off", "off:clock"}, {"procs off", "off:procs"}, {"heap off", "off:heap"}, {"conn off", "off:conn"},
}

// tuningStream is the JetStream stream the section reads.
const tuningStream = "TUNING"

func runTuning(ctx context.Context, b *bench) (*TuningSection, error) {
	s := &TuningSection{Runs: 3, WarmupSeconds: 2, WindowSeconds: 8, Rows: tuningRows}
	if b.o.quick {
		s.Runs, s.WarmupSeconds, s.WindowSeconds = 1, 1, 3
	}
	limits := []float64{100, 1000}
	n := int(slices.Max(limits) * (s.WarmupSeconds + s.WindowSeconds + 10))
	progress("tuning: %d messages into JetStream", n)
	drop, err := b.stream(ctx, tuningStream, n)
	if err != nil {
		return nil, err
	}
	defer drop()
	sink, caFile, stop, err := startTLSSink(b.o.tmp)
	if err != nil {
		return nil, err
	}
	defer stop()

	for _, limit := range limits {
		c := PeerCase{Name: fmt.Sprintf("tuning-%g", limit), Limit: limit, Baseline: tuningRows[0].Name}
		for _, row := range tuningRows {
			c.Parties = append(c.Parties, PeerParty{Name: row.Name, Label: row.Env})
		}
		for rep := 1; rep <= s.Runs; rep++ {
			for i, row := range tuningRows {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				id := fmt.Sprintf("tuning-%g-%d-%d", limit, i, rep)
				r, err := measureTuning(ctx, b, sink, caFile, id, limit, row, s)
				if err != nil {
					return nil, fmt.Errorf("%g/s, %s, run %d: %w", limit, row.Name, rep, err)
				}
				progress("tuning: %g/s %-10s run %d: %6.1f µs/msg (%4.1f%% of a core), %+.2f%%, most %d per 100 ms, jitter p99 %s",
					limit, row.Name, rep, r.CPUUs, r.CPUPct, r.RateErrPct, r.Max100ms, micros(r.JitterP99))
				c.Parties[i].Runs = append(c.Parties[i].Runs, r)
			}
		}
		c.summarize()
		s.Cases = append(s.Cases, c)
	}
	return s, nil
}

// measureTuning runs one child of row at limit and measures its window.
func measureTuning(ctx context.Context, b *bench, sink *sink, caFile, id string, limit float64, row TuningKnobs, s *TuningSection) (PeerRun, error) {
	before := sink.count.Load()
	pipelines := pipelineYAML("tuning", b.natsYAML(tuningStream, id),
		"bucket: {capacity: 1000, max_queue_time: 1m}",
		fmt.Sprintf("rate: {mode: leaky, limit: %v}", limit),
		fmt.Sprintf("sink: {http: {url: %q, max_in_flight: 8, tls: {ca_file: %q}}}", sink.URL, caFile))
	ch, err := b.startShaper(id, pipelines, "SHAPER_TUNING="+row.Env)
	if err != nil {
		return PeerRun{}, err
	}
	defer ch.stop(10 * time.Second)
	ch.clock = true // its process CPU clock, to the nanosecond
	if !waitFor(ctx, time.Minute, sink.reached(before+1)) {
		return PeerRun{}, fmt.Errorf("no request at the HTTPS sink within a minute; its log:\n%s", ch.tail())
	}
	time.Sleep(time.Duration(s.WarmupSeconds * float64(time.Second)))
	t0, cpu0 := time.Now(), ch.cpu()
	time.Sleep(time.Duration(s.WindowSeconds * float64(time.Second)))
	t1, cpu1 := time.Now(), ch.cpu()
	return peerRun(limit, between(sink.arrivals(), t0, t1), nil, t1.Sub(t0), cpu1-cpu0, 0, 0), nil
}

// startTLSSink starts a recording sink (sink.go) served over TLS on
// 127.0.0.1, offering HTTP/1.1 only, and writes its certificate into dir
// for the child's tls.ca_file.
func startTLSSink(dir string) (s *sink, caFile string, stop func(), err error) {
	s = &sink{record: true}
	ts := httptest.NewUnstartedServer(s)
	ts.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
	ts.StartTLS()
	s.URL = ts.URL + "/callback"
	caFile = filepath.Join(dir, "tuning-sink-ca.pem")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(caFile, cert, 0o600); err != nil {
		ts.Close()
		return nil, "", nil, err
	}
	return s, caFile, ts.Close, nil
}

// markdown writes the tuning section.
func (s *TuningSection) markdown(p func(string, ...any), r *Report) {
	p("## Tuning\n")
	p("What each knob of `internal/tuning` buys on the path users run ([tuning.md](tuning.md)): a `shaper run` child delivers a JetStream backlog to an HTTPS sink (TLS, HTTP/1.1, answering 200; the broker and the sink in the harness process), leaky, `max_in_flight` 8, with `SHAPER_TUNING` set as the row says: every knob on, every knob off, and each")
	p("knob off alone. The rows of a limit run in turn, %d %s; the figures are the medians. CPU is the child's process CPU",
		s.Runs, map[bool]string{true: "time", false: "times"}[s.Runs == 1])
	p("clock over a window of %.0f s that starts %.0f s after the sink's first request, per request the sink received in it;",
		s.WindowSeconds, s.WarmupSeconds)
	p("rate, spacing and jitter are of the arrivals at the sink's handler. *× on*: the ratio to the row with every knob on.")
	measuredBy(p, s.Common, r)
	p("\n%s\n", loadLine(s.Load))
	table(p, "limit", "SHAPER_TUNING", ">CPU per message (share of a core)", ">× on", ">rate error", ">most per 100 ms", ">jitter p99")
	for _, c := range s.Cases {
		for i, row := range c.Parties {
			limit := ""
			if i == 0 {
				limit = fmt.Sprintf("%v/s", c.Limit)
			}
			m := row.Median
			p("| %s | `%s` | %.0f µs (%.0f%%) | %s | %s | %d | %s |", limit, row.Label, m.CPUUs, m.CPUPct,
				ratioText(row.CPURatio), signedPct(m.RateErrPct), m.Max100ms, micros(m.JitterP99))
		}
	}
	p("")
}
