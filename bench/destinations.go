package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// DestinationsSection is what per-message destinations cost
// (sink.http.url_from with key.from: host): `shaper run`
// children one after the other, each over a window at the same rate, one
// sending each message to the host it names, one of Hosts HTTP servers on
// their own loopback addresses, and two peers with one host: url_from
// naming always the same one, and a fixed url. Each server counts the connections it
// accepts, so the section tells whether the sink keeps a host's
// connections and reuses them.
type DestinationsSection struct {
	Common
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
}

// DestinationRun is one child of the destinations section: a Kafka
// backlog of Published messages whose header Notify-Url names Hosts hosts
// in turn, delivered at the section's limit. Delivered, Rate and the costs
// are over the window; the connection counts are the servers' from the
// child's start to the window's end.
type DestinationRun struct {
	Name      string `json:"name"`
	Label     string `json:"label"`
	Hosts     int    `json:"hosts"`
	Published int    `json:"published"`
	Window
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

// The destinations section's runs, by name, and the header that names a
// message's destination.
const (
	destinationsMany   = "url_from_many"
	destinationsOne    = "url_from_one"
	destinationsFixed  = "url"
	destinationsHeader = "Notify-Url"
)

func runDestinations(ctx context.Context, b *bench) (*DestinationsSection, error) {
	s := &DestinationsSection{Hosts: 1000, Limit: 2000, Capacity: 10_000, MaxInFlight: 64, MaxInFlightPerHost: 2}
	window := 20 * time.Second
	if b.o.quick {
		s.Hosts, s.Limit, s.Capacity, window = 100, 500, 2_500, 4*time.Second
	}
	// Enough for the bucket, the start and the window, with room to spare.
	n := s.Capacity + int(s.Limit*(window.Seconds()+15))
	cases := []struct {
		name, label, topic string
		hosts              int
	}{
		{destinationsFixed, "1 host, url", "destinationurl", 1},
		{destinationsOne, "1 host, url_from", "destination1", 1},
		{destinationsMany, fmt.Sprintf("%s hosts, url_from", thousands(s.Hosts)), "destinations", s.Hosts},
	}
	fleets := make([]fleet, 0, len(cases))
	defer func() {
		for _, f := range fleets {
			f.close()
		}
	}()
	for _, c := range cases {
		f, err := startFleet(c.hosts)
		if err != nil {
			return nil, err
		}
		fleets = append(fleets, f)
		progress("destinations: publishing %d messages naming %d hosts to Kafka", n, c.hosts)
		urls := f.urls()
		if err := b.kafka.PublishMessages(ctx, c.topic, n, func(i int) kafka.Message {
			return kafka.Message{Value: payload(i), Headers: []kafka.Header{{Key: destinationsHeader, Value: []byte(urls[i%len(urls)])}}}
		}); err != nil {
			return nil, err
		}
	}
	// One after the other, so that each child has the machine's cores to
	// itself: side by side on two cores, three children at 2000/s with the
	// broker and the servers saturated them, and none kept the rate.
	for i, c := range cases {
		r := DestinationRun{Name: c.name, Label: c.label, Hosts: c.hosts, Published: n}
		if err := s.measure(ctx, b, &r, c.topic, fleets[i], c.name != destinationsFixed, window); err != nil {
			return nil, fmt.Errorf("%s: %w", c.label, err)
		}
		s.Runs = append(s.Runs, r)
	}
	many, _ := find(s.Runs, destinationsMany)
	if fixed, ok := find(s.Runs, destinationsFixed); ok && fixed.ShaperUs > 0 {
		s.CPURatio = many.ShaperUs / fixed.ShaperUs
	}
	if one, ok := find(s.Runs, destinationsOne); ok && one.ShaperUs > 0 {
		s.URLFromRatio = many.ShaperUs / one.ShaperUs
	}
	return s, nil
}

// measure runs a child on topic sending to the hosts of f: with urlFrom,
// to the host each message names, every host of f allowed and each a
// lane; else to f's one host. It waits for two seconds of steady delivery
// after its bucket filled, and measures it over window into r.
func (s *DestinationsSection) measure(ctx context.Context, b *bench, r *DestinationRun, topic string, f fleet, urlFrom bool, window time.Duration) error {
	common := fmt.Sprintf("max_in_flight: %d, max_in_flight_per_host: %d, timeout: 2s", s.MaxInFlight, s.MaxInFlightPerHost)
	lines := []string{fmt.Sprintf("sink: {http: {url: %q, %s}}", f[0].URL, common)}
	if urlFrom {
		ips := make([]string, len(f))
		for i := range f {
			ips[i] = strconv.Quote(hostIP(i))
		}
		// Loopback addresses are refused without allow_private.
		lines = []string{"key: {from: host}", fmt.Sprintf("sink: {http: {url_from: \"header:%s\", allowed_hosts: [%s], allow_private: true, %s}}",
			destinationsHeader, strings.Join(ips, ", "), common)}
	}
	lines = append(lines[:len(lines)-1], fmt.Sprintf("bucket: {capacity: %d, max_queue_time: 1m}", s.Capacity), fmt.Sprintf("rate: {limit: %v}", s.Limit), lines[len(lines)-1])
	p, err := b.startShaper("destinations-"+r.Name, pipelineYAML("destinations", b.kafkaYAML(topic, "shaper-destinations-"+r.Name, true), lines...))
	if err != nil {
		return err
	}
	defer p.kill()
	if !waitFor(ctx, time.Minute, func() bool { return f.counts().requests >= int64(2*s.Limit) }) {
		return fmt.Errorf("no steady delivery within a minute; log:\n%s", p.tail())
	}
	progress("destinations: %s at %v/s over %v", r.Label, s.Limit, window)
	accepts0 := f.counts().connections
	w := daemons{p}.measure([]func() int64{f.requests}, window)[0]
	c := f.counts()
	p.stop(10 * time.Second)
	r.Window = w
	r.Requests, r.HostsReached = c.requests, c.reached
	r.Connections, r.WindowConnections, r.MaxConnections, r.MaxOpen = c.connections, c.connections-accepts0, c.maxConnections, c.maxOpen
	progress("destinations: %s: %.0f/s, %.1f µs/msg in shaper (%.1f%% of a core, %.0f allocs/msg); %d connections for %d requests to %d hosts (%d in the window), at most %d to one host, %d open at once",
		r.Label, r.Rate, r.ShaperUs, r.ShaperPct, r.Allocs, r.Connections, r.Requests, r.HostsReached, r.WindowConnections, r.MaxConnections, r.MaxOpen)
	return nil
}
