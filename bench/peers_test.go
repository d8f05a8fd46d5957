package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPeerRunTakesRateSpacingAndCPUPerMessageFromTheWindowsArrivals(t *testing.T) {
	// 11 arrivals 10 ms apart (100/s), the fourth 2 ms late, over a 100 ms
	// window in which the party used 20 ms of CPU, the broker 10 ms and the
	// sink 5 ms.
	ts := at(0, 10, 20, 32, 40, 50, 60, 70, 80, 90, 100)
	r := peerRun(100, ts, nil, 100*time.Millisecond, 22*time.Millisecond, 11*time.Millisecond, 5500*time.Microsecond)
	want := PeerRun{
		Seconds: 0.1, Delivered: 11, CPUUs: 2000, CPUPct: 22, BrokerUs: 1000, SinkUs: 500,
		Timing: Timing{Rate: 100, RateErrPct: 0, Max100ms: 10, JitterP50: 0, JitterP99: 2000},
	}
	if math.Abs(r.Rate-want.Rate) > 1e-9 || math.Abs(r.RateErrPct) > 1e-9 || math.Abs(r.CPUPct-want.CPUPct) > 1e-9 {
		t.Errorf("peerRun rate %v (error %v%%), CPU %v%% of a core; want %v (0%%), %v%%", r.Rate, r.RateErrPct, r.CPUPct, want.Rate, want.CPUPct)
	}
	r.Rate, r.RateErrPct, r.CPUPct = want.Rate, want.RateErrPct, want.CPUPct
	if r != want {
		t.Errorf("peerRun = %+v; want %+v", r, want)
	}
	if empty := peerRun(100, nil, nil, time.Second, time.Second, 0, 0); empty.Delivered != 0 || empty.CPUUs != 0 || empty.CPUPct != 100 {
		t.Errorf("peerRun of no arrivals = %+v; want nothing delivered, no CPU per message, 100%% of a core", empty)
	}
}

func TestPeerCaseSummaryTakesMediansAndRatiosToTheHandWrittenLoop(t *testing.T) {
	runs := func(cpu, broker []float64) []PeerRun {
		out := make([]PeerRun, len(cpu))
		for i := range cpu {
			out[i] = PeerRun{CPUUs: cpu[i], BrokerUs: broker[i], Timing: Timing{Max100ms: 100 + i}}
		}
		return out
	}
	c := PeerCase{Baseline: partyLoop, Parties: []PeerParty{
		{Name: partyLoop, ReadsBroker: true, Runs: runs([]float64{300, 200, 100}, []float64{50, 60, 40})},
		{Name: partyBenthos, ReadsBroker: false, Runs: runs([]float64{150, 900, 100}, []float64{0, 0, 0})},
		{Name: partyShaper, ReadsBroker: true, Runs: runs([]float64{500, 400, 450}, []float64{200, 100, 150})},
	}}
	c.summarize()
	tests := []struct {
		name                 string
		cpu, broker          float64
		cpuRatio, brokerRate float64
	}{
		{partyLoop, 200, 50, 1, 1},
		{partyBenthos, 150, 0, 0.75, 0}, // no broker: no broker ratio
		{partyShaper, 450, 150, 2.25, 3},
	}
	for _, tt := range tests {
		p, ok := find(c.Parties, tt.name)
		if !ok {
			t.Fatalf("party %q not found", tt.name)
		}
		if p.Median.CPUUs != tt.cpu || p.Median.BrokerUs != tt.broker || p.Median.Max100ms != 101 {
			t.Errorf("%s: median CPU %v, broker %v, most per 100 ms %d; want %v, %v, 101", tt.name, p.Median.CPUUs, p.Median.BrokerUs, p.Median.Max100ms, tt.cpu, tt.broker)
		}
		if p.CPURatio != tt.cpuRatio || p.BrokerRatio != tt.brokerRate {
			t.Errorf("%s: ratios %v, %v; want %v, %v", tt.name, p.CPURatio, p.BrokerRatio, tt.cpuRatio, tt.brokerRate)
		}
	}
}

func TestPeersGoalsHoldShaperToItsShareOfTheLoopsCPUAndToItsPrecision(t *testing.T) {
	tests := []struct {
		name                  string
		limit                 float64
		cpuRatio, brokerRatio float64
		shaper                PeerRun
		want                  []bool // CPU, broker, precision; precision only above 1000/s
	}{
		{"all met", 1000, 0.6, 1.2, PeerRun{Timing: Timing{RateErrPct: -0.1, Max100ms: 102, JitterP99: 1000}}, []bool{true, true, true}},
		{"CPU over", 1000, 0.61, 1, PeerRun{Timing: Timing{Max100ms: 101, JitterP99: 400}}, []bool{false, true, true}},
		{"broker over", 1000, 0.5, 1.21, PeerRun{Timing: Timing{Max100ms: 101, JitterP99: 400}}, []bool{true, false, true}},
		{"rate error over", 1000, 0.5, 1, PeerRun{Timing: Timing{RateErrPct: 0.11, Max100ms: 101, JitterP99: 400}}, []bool{true, true, false}},
		{"a crowded 100 ms", 1000, 0.5, 1, PeerRun{Timing: Timing{Max100ms: 103, JitterP99: 400}}, []bool{true, true, false}},
		{"jitter over", 1000, 0.5, 1, PeerRun{Timing: Timing{Max100ms: 101, JitterP99: 1001}}, []bool{true, true, false}},
		{"no CPU goal at 5000/s", 5000, 1.5, 0.3, PeerRun{Timing: Timing{Max100ms: 101, JitterP99: 400}}, []bool{true}},
		// With wire times the goal is held to them, whatever the
		// handler's.
		{"crowded at the handler only", 1000, 0.5, 1, PeerRun{Timing: Timing{Max100ms: 106, JitterP99: 1200}, Wire: &Timing{Max100ms: 102, JitterP99: 400}}, []bool{true, true, true}},
		{"crowded on the wire", 1000, 0.5, 1, PeerRun{Timing: Timing{Max100ms: 101, JitterP99: 400}, Wire: &Timing{Max100ms: 103, JitterP99: 400}}, []bool{true, true, false}},
		{"rate error on the wire", 1000, 0.5, 1, PeerRun{Timing: Timing{Max100ms: 101}, Wire: &Timing{RateErrPct: -0.11, Max100ms: 101}}, []bool{true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &PeersSection{Cases: []PeerCase{{
				Source: "NATS JetStream", Limit: tt.limit, Allowed100ms: 102, Baseline: partyLoop,
				Parties: []PeerParty{
					{Name: partyLoop, ReadsBroker: true, Runs: []PeerRun{{}}, Median: PeerRun{CPUUs: 100, BrokerUs: 50}},
					{Name: partyShaper, ReadsBroker: true, Runs: []PeerRun{tt.shaper}, Median: tt.shaper, CPURatio: tt.cpuRatio, BrokerRatio: tt.brokerRatio},
				},
			}}}
			var goals goals
			s.addGoals(&goals)
			if len(goals) != len(tt.want) {
				t.Fatalf("goals() = %+v; want %d goals", goals, len(tt.want))
			}
			for i, g := range goals {
				if g.Met != tt.want[i] {
					t.Errorf("goal %q met = %v (measured %s); want %v", g.Goal, g.Met, g.Measured, tt.want[i])
				}
			}
			precision := goals[len(goals)-1]
			if onWire := strings.Contains(precision.Goal, "on the wire"); onWire != (tt.shaper.Wire != nil) || onWire && !strings.Contains(precision.Measured, "at the sink's handler") {
				t.Errorf("precision goal %q, measured %q: want it on the wire, with the handler's figures beside, exactly when there are wire times (%v)", precision.Goal, precision.Measured, tt.shaper.Wire != nil)
			}
		})
	}
}

// processCPU reads a process's CPU time in nanoseconds: this process's, as
// getrusage counts it, and another's (a child's) as its /proc/<pid>/stat
// does to within a clock tick.
func TestProcessCPUCountsWhatGetrusageAndProcStatCount(t *testing.T) {
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		t.Fatal(err)
	}
	c0, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, deadline := 0, time.Now().Add(200*time.Millisecond); time.Now().Before(deadline); x++ {
		_ = x * x // burn CPU
	}
	c1, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		t.Fatal(err)
	}
	rusage := time.Duration(after.Utime.Nano()+after.Stime.Nano()) - time.Duration(before.Utime.Nano()+before.Stime.Nano())
	// On a loaded machine the loop gets less than its 200 ms of CPU; what
	// it got, the clock and getrusage must agree on.
	if d := c1 - c0; d <= 0 || d < rusage-20*time.Millisecond || d > rusage+20*time.Millisecond {
		t.Errorf("CPU clock moved %v over a 200 ms busy loop; getrusage counted %v", d, rusage)
	}

	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	time.Sleep(300 * time.Millisecond)
	stat, err2 := procCPU(child.Process.Pid) // first: the clock only grows
	clock, err1 := processCPU(child.Process.Pid)
	if err1 != nil || err2 != nil {
		t.Fatalf("processCPU: %v; procCPU: %v", err1, err2)
	}
	if clock < stat || clock > stat+2*clockTick {
		t.Errorf("a child's CPU clock %v; its /proc/<pid>/stat %v: want the clock within a tick above", clock, stat)
	}
}

// TestPeerSinkTimesEachRequestOnTheWireAndAtItsHandler sends requests one
// after another to the sink's process, on one kept-alive connection and
// each on a new one (whose first bytes may arrive before the sink accepts
// it), and finds each request's wire time between its sending and its
// handler time, and that before its answer; over TLS too (-tls), where
// the certificate it wrote is the one to trust.
func TestPeerSinkTimesEachRequestOnTheWireAndAtItsHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tmp, bins := buildTestPeers(ctx, t, "sink")
	for _, ca := range []string{"", filepath.Join(tmp, "sink-ca.pem")} {
		sink, err := startPeerSink(ctx, tmp, filepath.Join(bins, "sink"), ca)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.close()
		if want := map[bool]string{false: "http://", true: "https://"}[ca != ""]; !strings.HasPrefix(sink.url, want) {
			t.Errorf("sink URL %s; want %s", sink.url, want)
		}
		timeEachRequest(t, sink)
	}
}

func timeEachRequest(t *testing.T, sink *peerSink) {
	for _, keepAlive := range []bool{true, false} {
		if _, err := sink.call(http.MethodPost, "/reset"); err != nil {
			t.Fatal(err)
		}
		transport := sink.client.Transport.(*http.Transport).Clone()
		transport.DisableKeepAlives = !keepAlive
		client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
		const n = 20
		var sent, answered []time.Time
		for range n {
			sent = append(sent, time.Now())
			resp, err := client.Post(sink.callbackURL(), "application/json", strings.NewReader(`{"id":1}`))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered = append(answered, time.Now())
		}
		client.CloseIdleConnections()
		handler, wire, err := sink.arrivals()
		if err != nil {
			t.Fatal(err)
		}
		if len(handler) != n || len(wire) != n {
			t.Fatalf("keep-alive %v: %d handler times and %d wire times (nil: some request had none); want %d of each", keepAlive, len(handler), len(wire), n)
		}
		for i := range n {
			if sent[i].After(wire[i]) || wire[i].After(handler[i]) || handler[i].After(answered[i]) {
				t.Errorf("keep-alive %v, request %d: sent %v, on the wire %v, at the handler %v, answered %v; want them in that order",
					keepAlive, i, sent[i].UnixNano(), wire[i].UnixNano(), handler[i].UnixNano(), answered[i].UnixNano())
			}
		}
	}
}

// buildTestPeers builds the named programs of bench/peers into a directory
// of the test's, and returns the test's temporary directory and that one.
func buildTestPeers(ctx context.Context, t *testing.T, programs ...string) (tmp, bins string) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp = t.TempDir()
	bins = filepath.Join(tmp, "bin")
	if err := buildPeers(ctx, &bench{o: &options{root: root, tmp: tmp}}, bins, programs...); err != nil {
		t.Fatal(err)
	}
	return tmp, bins
}
