package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// DestinationsSection is what per-message destinations cost
// (sink.http.url_from with key.from: host, issue 14): `shaper run`
// children one after the other, each over a window at the same rate, one
// sending each message to the host it names, one of Hosts HTTP servers on
// their own loopback addresses, and two peers with one host: url_from
// naming always the same one, and a fixed url. Each server counts the connections it
// accepts, so the section tells whether the sink keeps a host's
// connections and reuses them.
type DestinationsSection struct {
	Load Load `json:"load"`
	// Hosts is how many hosts the messages of the many-hosts run name in
	// turn; Limit, Capacity, MaxInFlight and MaxInFlightPerHost are every
	// child's rate.limit, bucket.capacity and sink.http settings.
	Hosts              int              `json:"hosts"`
	Limit              float64          `json:"limit"`
	Capacity           int              `json:"capacity"`
	MaxInFlight        int              `json:"max_in_flight"`
	MaxInFlightPerHost int              `json:"max_in_flight_per_host"`
	Runs               []DestinationRun `json:"runs"`
	// CPURatio is the many-hosts run's CPU per message over the fixed
	// url's; URLFromRatio over url_from's with one host (0: not measured).
	CPURatio     float64 `json:"cpu_ratio"`
	URLFromRatio float64 `json:"cpu_ratio_url_from_one_host"`
	// MeasuredBy is the run that measured the section, which stays with it
	// when it is merged into the report of another run.
	MeasuredBy Provenance `json:"measured_by"`
}

// DestinationRun is one child of the destinations section: a Kafka
// backlog of Published messages whose header Notify-Url names Hosts hosts
// in turn, delivered at the section's limit. Delivered, Rate and the costs
// are over the window; the connection counts are the servers' from the
// child's start to the window's end.
type DestinationRun struct {
	Name      string  `json:"name"`
	Label     string  `json:"label"`
	Hosts     int     `json:"hosts"`
	Published int     `json:"published"`
	Seconds   float64 `json:"seconds"`
	Delivered int64   `json:"delivered"`
	Rate      float64 `json:"rate"`
	ChildCost
	// Requests is every request the servers answered; HostsReached how
	// many of them got at least one.
	Requests     int64 `json:"requests"`
	HostsReached int   `json:"hosts_reached"`
	// Connections is every connection the servers accepted, and
	// WindowConnections those accepted in the window; MaxConnections the
	// most one server accepted, and MaxOpen the most one held open at once.
	Connections       int64 `json:"connections"`
	WindowConnections int64 `json:"window_connections"`
	MaxConnections    int64 `json:"max_connections_one_host"`
	MaxOpen           int64 `json:"max_open_one_host"`
}

// The destinations section's runs, by name.
const (
	destinationsMany    = "url_from_many"
	destinationsOne     = "url_from_one"
	destinationsFixed   = "url"
	destinationsHeader  = "Notify-Url"
	topicDestinations   = "destinations"
	topicDestinationOne = "destination1"
	topicDestinationURL = "destinationurl"
)

func runDestinations(ctx context.Context, o *options, env *environment) (*DestinationsSection, error) {
	probe := startLoadProbe()
	s := &DestinationsSection{Hosts: 1000, Limit: 2000, Capacity: 10_000, MaxInFlight: 64, MaxInFlightPerHost: 2}
	window := 20 * time.Second
	if o.quick {
		s.Hosts, s.Limit, s.Capacity, window = 100, 500, 2_500, 4*time.Second
	}
	// Enough for the bucket, the start and the window, with room to spare.
	n := s.Capacity + int(s.Limit*(window.Seconds()+15))
	cases := []struct {
		name, label, topic string
		hosts              int
		urlFrom            bool
	}{
		{destinationsFixed, "1 host, url", topicDestinationURL, 1, false},
		{destinationsOne, "1 host, url_from", topicDestinationOne, 1, true},
		{destinationsMany, fmt.Sprintf("%s hosts, url_from", thousands(s.Hosts)), topicDestinations, s.Hosts, true},
	}
	fleets := make([]*hostFleet, 0, len(cases))
	defer func() {
		for _, f := range fleets {
			f.close()
		}
	}()
	for _, c := range cases {
		f, err := startHostFleet(c.hosts)
		if err != nil {
			return nil, err
		}
		fleets = append(fleets, f)
		progress("destinations: publishing %d messages naming %d hosts to Kafka", n, c.hosts)
		if err := publishDestinations(ctx, env.kafka, c.topic, n, f.urls()); err != nil {
			return nil, err
		}
	}
	// One after the other, so that each child has the machine's cores to
	// itself: side by side on two cores, three children at 2000/s with the
	// broker and the servers saturated them, and none kept the rate.
	for i, c := range cases {
		r := DestinationRun{Name: c.name, Label: c.label, Hosts: c.hosts, Published: n}
		if err := s.measure(ctx, o, env, &r, c.topic, fleets[i], c.urlFrom, window); err != nil {
			return nil, fmt.Errorf("%s: %w", c.label, err)
		}
		s.Runs = append(s.Runs, r)
	}
	if fixed, ok := s.run(destinationsFixed); ok && fixed.ShaperUs > 0 {
		if many, ok := s.run(destinationsMany); ok {
			s.CPURatio = many.ShaperUs / fixed.ShaperUs
		}
	}
	if one, ok := s.run(destinationsOne); ok && one.ShaperUs > 0 {
		if many, ok := s.run(destinationsMany); ok {
			s.URLFromRatio = many.ShaperUs / one.ShaperUs
		}
	}
	s.Load = probe.stop()
	return s, nil
}

// pipelineYAML is the pipelines block of a child consuming topic as group
// and sending to the hosts of f: with urlFrom, to the host each message
// names, every host of f allowed and each a lane; else to f's one host.
func (s *DestinationsSection) pipelineYAML(env *environment, topic, group string, f *hostFleet, urlFrom bool) string {
	common := fmt.Sprintf("max_in_flight: %d, max_in_flight_per_host: %d, timeout: 2s", s.MaxInFlight, s.MaxInFlightPerHost)
	key, sink := "", fmt.Sprintf("{url: %q, %s}", f.urls()[0], common)
	if urlFrom {
		ips := make([]string, len(f.hosts))
		for i, h := range f.hosts {
			ips[i] = strconv.Quote(h.ip)
		}
		// Loopback addresses are refused without allow_private.
		key = "\n    key: {from: host}"
		sink = fmt.Sprintf("{url_from: \"header:%s\", allowed_hosts: [%s], allow_private: true, %s}", destinationsHeader, strings.Join(ips, ", "), common)
	}
	return fmt.Sprintf(`
  - name: destinations
    source:%s%s
    bucket: {capacity: %d, max_queue_time: 1m}
    rate: {limit: %v}
    sink:
      http: %s
`, env.kafka.sourceYAML(topic, group, true), key, s.Capacity, s.Limit, sink)
}

// run returns the section's run of that name.
func (s *DestinationsSection) run(name string) (DestinationRun, bool) {
	for _, r := range s.Runs {
		if r.Name == name {
			return r, true
		}
	}
	return DestinationRun{}, false
}

// measure runs a child on topic sending to the hosts of f, waits for two
// seconds of steady delivery after its bucket filled, and measures it over
// window into r.
func (s *DestinationsSection) measure(ctx context.Context, o *options, env *environment, r *DestinationRun, topic string, f *hostFleet, urlFrom bool, window time.Duration) error {
	ch, err := startChild(env.bin, o.tmp, "destinations-"+r.Name, s.pipelineYAML(env, topic, "shaper-destinations-"+r.Name, f, urlFrom))
	if err != nil {
		return err
	}
	defer ch.kill()
	if !waitRequests(ctx, f, int64(2*s.Limit), time.Minute) {
		return fmt.Errorf("no steady delivery within a minute; log:\n%s", ch.tail())
	}
	progress("destinations: %s at %v/s over %v", r.Label, s.Limit, window)
	accepts0 := f.counts().connections
	w := measureCounted(ch, f.requests.Load, window)
	c := f.counts()
	r.Seconds, r.Delivered, r.Rate, r.ChildCost = w.seconds, w.delivered, w.rate, w.cost
	r.Requests, r.HostsReached = c.requests, c.reached
	r.Connections, r.WindowConnections, r.MaxConnections, r.MaxOpen = c.connections, c.connections-accepts0, c.maxConnections, c.maxOpen
	progress("destinations: %s: %.0f/s, %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg); %d connections for %d requests to %d hosts (%d in the window), at most %d to one host, %d open at once",
		r.Label, r.Rate, r.ShaperUs, r.ShaperPct, r.Allocs, r.Connections, r.Requests, r.HostsReached, r.WindowConnections, r.MaxConnections, r.MaxOpen)
	ch.stop(10 * time.Second)
	return nil
}

// publishDestinations produces n records to topic, round robin over its
// partitions, record i with the payload of message i and header
// Notify-Url urls[i mod len(urls)], and waits until the broker has acked
// every one.
func publishDestinations(ctx context.Context, k *kafkaCluster, topic string, n int, urls []string) error {
	return k.PublishMessages(ctx, topic, n, func(i int) kafka.Message {
		return kafka.Message{Value: payload(i), Headers: []kafka.Header{{Key: destinationsHeader, Value: []byte(urls[i%len(urls)])}}}
	})
}

// hostFleet is HTTP servers on distinct loopback addresses, one per host
// a message may name, each answering 200 at once and counting its
// requests and the connections it accepts. Linux routes all of
// 127.0.0.0/8 to the loopback interface, so no address needs configuring.
type hostFleet struct {
	hosts    []*host
	requests atomic.Int64 // every host's
	wg       sync.WaitGroup
}

// host is one server of a fleet.
type host struct {
	ip, url string
	srv     *http.Server
	// requests and accepts count what the server answered and accepted;
	// open is the connections it holds now and maxOpen the most at once.
	requests, accepts, open, maxOpen atomic.Int64
}

// maxFleet is how many hosts hostIP can name: 127.0.1.1 to 127.0.254.250.
const maxFleet = 254 * 250

// hostIP is the loopback address of host i: 127.0.1.1, ..., 127.0.1.250,
// 127.0.2.1, ... (no .0 or .255, nor 127.0.0.x, where other servers of the
// harness listen).
func hostIP(i int) string {
	return fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
}

func startHostFleet(n int) (_ *hostFleet, err error) {
	if n < 1 || n > maxFleet {
		return nil, fmt.Errorf("host fleet: want 1 to %d hosts, got %d", maxFleet, n)
	}
	f := &hostFleet{hosts: make([]*host, 0, n)}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	for i := range n {
		h := &host{ip: hostIP(i)}
		ln, err := net.Listen("tcp", net.JoinHostPort(h.ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("host fleet: listen on %s: %w", h.ip, err)
		}
		h.url = "http://" + ln.Addr().String() + "/notify"
		h.srv = &http.Server{
			Handler:           f.handler(h),
			ConnState:         h.connState,
			ReadHeaderTimeout: 5 * time.Second,
			// Longer than any run: a connection the client keeps is
			// never closed by the server.
			IdleTimeout: 10 * time.Minute,
		}
		f.hosts = append(f.hosts, h)
		f.wg.Go(func() {
			if err := h.srv.Serve(countingListener{Listener: ln, accepts: &h.accepts}); !errors.Is(err, http.ErrServerClosed) {
				progress("host %s: %v", h.ip, err)
			}
		})
	}
	return f, nil
}

// handler answers 200 to every request to h, once its body is read.
func (f *hostFleet) handler(h *host) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.requests.Add(1)
		f.requests.Add(1)
		w.WriteHeader(http.StatusOK)
	})
}

// connState keeps h's open connections and the most at once.
func (h *host) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		n := h.open.Add(1)
		for m := h.maxOpen.Load(); n > m && !h.maxOpen.CompareAndSwap(m, n); m = h.maxOpen.Load() {
		}
	case http.StateClosed, http.StateHijacked:
		h.open.Add(-1)
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepts *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

// urls returns the URL of each host, in order.
func (f *hostFleet) urls() []string {
	out := make([]string, len(f.hosts))
	for i, h := range f.hosts {
		out[i] = h.url
	}
	return out
}

// fleetCounts is what a fleet's servers counted.
type fleetCounts struct {
	requests, connections, maxConnections, maxOpen int64
	reached                                        int
}

func (f *hostFleet) counts() fleetCounts {
	var c fleetCounts
	for _, h := range f.hosts {
		r, a := h.requests.Load(), h.accepts.Load()
		c.requests += r
		c.connections += a
		c.maxConnections = max(c.maxConnections, a)
		c.maxOpen = max(c.maxOpen, h.maxOpen.Load())
		if r > 0 {
			c.reached++
		}
	}
	return c
}

func (f *hostFleet) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range f.hosts {
		_ = h.srv.Shutdown(ctx) // bounded; a slow client is not our problem here
	}
	f.wg.Wait()
}

// waitRequests waits until f's servers have answered n requests, and
// reports whether they did within timeout.
func waitRequests(ctx context.Context, f *hostFleet, n int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for f.requests.Load() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// goals are the destinations section's goals, for the report's table.
func (s *DestinationsSection) goals() []Goal {
	r, ok := s.run(destinationsMany)
	if !ok || r.HostsReached == 0 {
		return nil
	}
	return []Goal{{
		Goal: fmt.Sprintf("destinations: at most max_in_flight_per_host (%d) connections opened per host, reused (%s hosts at %g/s)",
			s.MaxInFlightPerHost, thousands(s.Hosts), s.Limit),
		Measured: fmt.Sprintf("at most %d to one host; %s for %s requests to %s hosts (%s per host)",
			r.MaxConnections, thousands(int(r.Connections)), thousands(int(r.Requests)), thousands(r.HostsReached),
			perText(float64(r.Connections)/float64(r.HostsReached))),
		Met: r.MaxConnections <= int64(s.MaxInFlightPerHost),
	}}
}

// perText writes a ratio to two decimals below 10, to one below 100,
// else whole, its digits grouped.
func perText(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return thousands(int(math.Round(v)))
}

// markdown writes the destinations section.
func (s *DestinationsSection) markdown(p func(string, ...any)) {
	p("## Per-message destinations (url_from)")
	p("")
	p("`shaper run` children one after the other, each consuming its own Kafka backlog (kfake) whose")
	p("header `%s` names in turn the hosts of its run, with `rate.limit` %g, `bucket: {capacity: %d, max_queue_time: 1m}`", destinationsHeader, s.Limit, s.Capacity)
	p("and `sink.http` `{max_in_flight: %d, max_in_flight_per_host: %d, timeout: 2s}`. Each host is an HTTP server in the", s.MaxInFlight, s.MaxInFlightPerHost)
	p("harness on its own loopback address (127.0.1.1, 127.0.1.2, ...: Linux routes all of 127.0.0.0/8 to `lo`) that")
	p("answers 200 at once and counts its requests, the connections it accepts (a wrapped `net.Listener`) and the most")
	p("it holds open at once.")
	p("")
	if r, ok := s.run(destinationsMany); ok {
		p("- *%s*: `url_from: header:%s`, `key: {from: host}` (each host a lane), `allowed_hosts` listing the %s", r.Label, destinationsHeader, thousands(r.Hosts))
		p("  addresses and `allow_private: true` (they are loopback).")
	}
	if r, ok := s.run(destinationsOne); ok {
		p("- *%s*: the same, every message naming one host.", r.Label)
	}
	if r, ok := s.run(destinationsFixed); ok {
		p("- *%s*: a fixed `url:` to one host, no key: what a pipeline with one destination does.", r.Label)
	}
	p("")
	p("CPU, allocations and the harness's CPU (the broker and the servers) are measured as in *CPU per delivered message*")
	p("above, over a window after two seconds of steady delivery. Connections are counted from the child's start to the")
	p("window's end. The children run one after the other, so that each has the machine's cores to itself.")
	if m := s.MeasuredBy; m.Command != "" {
		p("Measured by `%s` (%s).", reproducible(m.Command), m.Date)
	}
	p("")
	p("%s", loadLine(s.Load))
	p("")
	p("| run | window | delivered | shaper CPU per message | shaper CPU | shaper allocations per message | broker + servers CPU per message |")
	p("|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range s.Runs {
		p("| %s | %.1f s | %s (%.0f/s) | %.1f µs | %.1f%% of a core | %.0f (%.1f KiB) | %.1f µs |", r.Label, r.Seconds, thousands(int(r.Delivered)),
			r.Rate, r.ShaperUs, r.ShaperPct, r.Allocs, r.AllocBytes/1024, r.HarnessUs)
	}
	p("")
	p("| run | requests | hosts reached | connections opened | of them in the window | most opened to one host (goal ≤ %d) | most open at once on one host | requests per connection |", s.MaxInFlightPerHost)
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range s.Runs {
		p("| %s | %s | %s of %s | %s | %s | %s | %d | %s |", r.Label, thousands(int(r.Requests)), thousands(r.HostsReached), thousands(r.Hosts),
			thousands(int(r.Connections)), thousands(int(r.WindowConnections)),
			mark(strconv.FormatInt(r.MaxConnections, 10), r.MaxConnections > int64(s.MaxInFlightPerHost)), r.MaxOpen,
			perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)))
	}
	p("")
	if s.CPURatio > 0 {
		line := fmt.Sprintf("With %s hosts a message cost %.2f× the CPU it cost with one fixed `url`", thousands(s.Hosts), s.CPURatio)
		if s.URLFromRatio > 0 {
			line += fmt.Sprintf(", %.2f× what it cost with `url_from` naming one host", s.URLFromRatio)
		}
		p("%s.", line)
	}
	if r, ok := s.run(destinationsMany); ok && r.HostsReached > 0 {
		if r.MaxConnections <= int64(s.MaxInFlightPerHost) {
			p("Each host's connections were kept and reused: at most %d opened to one host, %s requests per connection.",
				r.MaxConnections, perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)))
		} else {
			p("**More connections were opened than the goal allows**: %s for %s requests (%s requests per connection; %s in the",
				thousands(int(r.Connections)), thousands(int(r.Requests)), perText(float64(r.Requests)/math.Max(float64(r.Connections), 1)), thousands(int(r.WindowConnections)))
			p("window, %.0f/s), up to %d to one host against a goal of %d. No host had more than %d open at once.",
				float64(r.WindowConnections)/math.Max(r.Seconds, 1e-9), r.MaxConnections, s.MaxInFlightPerHost, r.MaxOpen)
		}
	}
	p("")
}
