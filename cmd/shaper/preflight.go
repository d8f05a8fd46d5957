package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/sinks"
)

// preflightTimeout bounds each reach of run --dry-run: the dial, the TLS
// handshake, the login and the one request.
const preflightTimeout = 5 * time.Second

// preflightName is the client name run --dry-run gives brokers.
const preflightName = "shaper-dry-run"

// reach is one thing run --dry-run connects to: a broker, Redis, a sink's
// host or its proxy, for one part of one pipeline.
type reach struct {
	kind string // what it is: kafka, nats, redis, http, https, proxy
	addr string // where, as host:port; never a credential
	role string // the part it serves, such as "source of psp"
	// try connects within ctx and says what it found there, or why it
	// failed; nil when there is nothing fixed to connect to (skip says
	// why).
	try  func(ctx context.Context) (found string, err error)
	skip string
}

// reachResult is how one reach went, as its report line.
type reachResult struct {
	line            string
	failed, skipped bool
}

// preflight connects to everything cfg names (run --dry-run): every Kafka
// broker (a metadata request for the topic), every NATS server (and, for
// a JetStream source, its stream), Redis (PING) and every sink host (a
// TCP and TLS handshake, no request) or the proxy in front of it. Each is
// reported on stdout as it completes, in config order, one line each:
//
//	ok   kafka 127.0.0.1:9092 (source of psp, topic callbacks: 4 partitions)
//	FAIL redis 10.0.0.5:6379 (rate.shared of psp): dial tcp 10.0.0.5:6379: connect: connection refused
//
// All run at once, each within preflightTimeout. It returns an error when
// any failed.
func preflight(ctx context.Context, cfg *config.File, stdout io.Writer) error {
	reaches := reachesOf(cfg)
	results := make([]chan reachResult, len(reaches))
	for i, r := range reaches {
		results[i] = make(chan reachResult, 1)
		go func() { results[i] <- r.run(ctx) }()
	}
	failed, skipped := 0, 0
	for _, res := range results {
		r := <-res
		fmt.Fprintln(stdout, r.line)
		if r.failed {
			failed++
		}
		if r.skipped {
			skipped++
		}
	}
	checked := len(reaches) - skipped
	if failed > 0 {
		return fmt.Errorf("run --dry-run: %d of %d checks failed", failed, checked)
	}
	fmt.Fprintf(stdout, "all %d checks ok, %d skipped\n", checked, skipped)
	return nil
}

// run tries r within preflightTimeout and reports it.
func (r reach) run(ctx context.Context) reachResult {
	head := fmt.Sprintf("%s %s", r.kind, r.addr)
	if r.try == nil {
		return reachResult{line: fmt.Sprintf("skip %s (%s): %s", head, r.role, r.skip), skipped: true}
	}
	ctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	found, err := r.try(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", preflightTimeout, err)
		}
		return reachResult{line: fmt.Sprintf("FAIL %s (%s): %v", head, r.role, oneLineErr(err)), failed: true}
	}
	return reachResult{line: fmt.Sprintf("ok   %s (%s, %s)", head, r.role, found)}
}

// oneLineErr is err's text on one line: a joined error has several.
func oneLineErr(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// reachesOf lists what cfg connects to, pipeline by pipeline: the source,
// rate.shared, the sink and the dead-letter target.
func reachesOf(cfg *config.File) []reach {
	var rs []reach
	for _, pc := range cfg.Pipelines {
		role := func(part string) string { return part + " of " + pc.Name }
		switch src := pc.Source; {
		case src.Kafka != nil:
			rs = append(rs, kafkaReaches(src.Kafka.Config, src.Kafka.Topic, role("source"))...)
		case src.NATS != nil:
			rs = append(rs, natsReaches(src.NATS.URL, role("source"), natsSourceCheck(src.NATS.Stream, src.NATS.Subject))...)
		}
		if sh := pc.Rate.Shared; sh != nil {
			rs = append(rs, redisReach(sh.Redis, role("rate.shared")))
		}
		switch sink := pc.Sink; {
		case sink.HTTP != nil:
			rs = append(rs, httpReach(*sink.HTTP, role("sink")))
		case sink.Kafka != nil:
			rs = append(rs, kafkaReaches(sink.Kafka.Config, sink.Kafka.Topic, role("sink"))...)
		case sink.NATS != nil:
			rs = append(rs, natsReaches(sink.NATS.URL, role("sink"), natsTargetCheck(sink.NATS.Subject))...)
		}
		if dl := pc.DeadLetter; dl != nil {
			switch {
			case dl.Kafka != nil:
				rs = append(rs, kafkaReaches(dl.Kafka.Config, dl.Kafka.Topic, role("dead_letter"))...)
			case dl.NATS != nil:
				rs = append(rs, natsReaches(dl.NATS.URL, role("dead_letter"), natsTargetCheck(dl.NATS.Subject))...)
			}
		}
	}
	return rs
}

// kafkaReaches asks each broker of cfg, alone, for the metadata of topic,
// over the TLS and SASL of cfg, as the source and publishers connect. The
// request never creates the topic.
func kafkaReaches(cfg kafkaconn.Config, topic, role string) []reach {
	var rs []reach
	for _, broker := range cfg.Brokers {
		rs = append(rs, reach{kind: "kafka", addr: broker, role: role, try: func(ctx context.Context) (string, error) {
			one := cfg
			one.Brokers = []string{broker}
			tr, err := kafkaconn.Transport(one, preflightName)
			if err != nil {
				return "", err
			}
			// The transport's first metadata request goes to the
			// bootstrap broker, for this topic only.
			tr.DialTimeout, tr.MetadataTopics = preflightTimeout, []string{topic}
			defer tr.CloseIdleConnections()
			client := &kafka.Client{Addr: kafka.TCP(broker), Transport: tr}
			md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
			if u := errors.Unwrap(err); u != nil {
				err = u // without "kafka.(*Client).Metadata: "
			}
			if err != nil {
				return "", err
			}
			for _, tp := range md.Topics {
				if tp.Name != topic {
					continue
				}
				if tp.Error != nil {
					return "", fmt.Errorf("topic %s: %w", topic, tp.Error)
				}
				return fmt.Sprintf("topic %s: %s", topic, plural(len(tp.Partitions), "partition")), nil
			}
			return "", fmt.Errorf("topic %s: not in the broker's answer", topic)
		}})
	}
	return rs
}

// natsReaches connects to each server of the comma-separated urls alone,
// with the credentials the URL carries, and runs then on the connection.
func natsReaches(urls, role string, then func(context.Context, *nats.Conn) (string, error)) []reach {
	var rs []reach
	for _, raw := range strings.Split(urls, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw // as nats.Connect reads it
		}
		rs = append(rs, reach{kind: "nats", addr: hostPort(raw, "4222"), role: role, try: func(ctx context.Context) (string, error) {
			dial := &natsDialer{ctx: ctx}
			nc, err := nats.Connect(raw, nats.Name(preflightName), nats.Timeout(preflightTimeout), nats.NoReconnect(), nats.SetCustomDialer(dial))
			if errors.Is(err, nats.ErrNoServers) && dial.err != nil {
				err = dial.err // why: "no servers available" says nothing
			}
			if err != nil {
				return "", err
			}
			defer nc.Close()
			return then(ctx, nc)
		}})
	}
	return rs
}

// natsDialer dials a NATS server within ctx and keeps the dial's error.
type natsDialer struct {
	ctx context.Context
	err error
}

func (d *natsDialer) Dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	c, d.err = (&net.Dialer{}).DialContext(d.ctx, network, addr)
	return c, d.err
}

// natsSourceCheck checks, for a JetStream source, that its stream exists,
// and says how many messages it holds; core NATS needs only the
// connection.
func natsSourceCheck(stream, subject string) func(context.Context, *nats.Conn) (string, error) {
	return func(ctx context.Context, nc *nats.Conn) (string, error) {
		if stream == "" {
			return "core NATS subject " + subject, nil
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return "", err
		}
		s, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", fmt.Errorf("stream %s not found: the operator creates it (shaper only makes its consumer)", stream)
		}
		if err != nil {
			return "", fmt.Errorf("stream %s: %w", stream, err)
		}
		return fmt.Sprintf("stream %s: %s", stream, plural(int(s.CachedInfo().State.Msgs), "message")), nil
	}
}

// natsTargetCheck says whether a stream stores what is published to
// subject, asking as the NATS publisher does.
func natsTargetCheck(subject string) func(context.Context, *nats.Conn) (string, error) {
	return func(ctx context.Context, nc *nats.Conn) (string, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return "", err
		}
		name, err := js.StreamNameBySubject(ctx, subject)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound),
			errors.Is(err, jetstream.ErrJetStreamNotEnabled),
			errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
			errors.Is(err, nats.ErrNoResponders):
			return "subject " + subject + ": no stream stores it (core NATS publish)", nil
		case err != nil:
			return "", fmt.Errorf("look up the stream of %s: %w", subject, err)
		}
		return fmt.Sprintf("subject %s: stored by stream %s", subject, name), nil
	}
}

// redisReach sends PING to the Redis of rate.shared, with its
// credentials and TLS.
func redisReach(cfg limiter.RedisConfig, role string) reach {
	return reach{kind: "redis", addr: strings.Join(cfg.Addresses(), ","), role: role, try: func(ctx context.Context) (string, error) {
		client, err := cfg.Client(preflightTimeout)
		if err != nil {
			return "", err
		}
		defer client.Close()
		if err := client.Ping(ctx).Err(); err != nil {
			return "", err
		}
		return "PING answered", nil
	}}
}

// httpReach makes the TCP handshake, and for https the TLS handshake with
// the sink's TLS settings, to the host of sink.http.url, or to the proxy
// the sink uses for it; it sends no request. With url_from there is no
// fixed host.
func httpReach(cfg sinks.HTTPConfig, role string) reach {
	if cfg.URLFrom != "" {
		return reach{kind: "http", addr: "url_from " + cfg.URLFrom, role: role,
			skip: "no fixed host to reach: each message names its own, among allowed_hosts"}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil { // not reached: the config was validated
		return broken("http", "(url not shown)", role, err)
	}
	target := hostPort(cfg.URL, map[string]string{"http": "80", "https": "443"}[u.Scheme])
	proxy, err := proxyOf(cfg)
	switch {
	case err != nil:
		return broken(u.Scheme, target, role, err)
	case proxy != nil:
		port := map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[proxy.Scheme]
		return reach{kind: "proxy", addr: hostPort(proxy.String(), port), role: role, try: func(ctx context.Context) (string, error) {
			how, err := handshake(ctx, proxy.Scheme, hostPort(proxy.String(), port), cfg.TLS)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s proxy for %s://%s: %s with the proxy; the sink behind it is not reached", proxy.Scheme, u.Scheme, target, how), nil
		}}
	}
	return reach{kind: u.Scheme, addr: target, role: role, try: func(ctx context.Context) (string, error) {
		how, err := handshake(ctx, u.Scheme, target, cfg.TLS)
		if err != nil {
			return "", err
		}
		return how + "; no request sent", nil
	}}
}

// broken is a reach that fails with err, connecting to nothing: a part
// that cannot be built.
func broken(kind, addr, role string, err error) reach {
	return reach{kind: kind, addr: addr, role: role, try: func(context.Context) (string, error) { return "", err }}
}

// proxyOf returns the proxy the HTTP sink of cfg sends its requests
// through, nil for none, as the sink itself decides it (sink.http.proxy,
// or the environment for "environment"). Its user information is gone:
// the handshake needs none.
func proxyOf(cfg sinks.HTTPConfig) (*url.URL, error) {
	if cfg.Proxy == "" {
		return nil, nil
	}
	h, err := sinks.NewHTTP(cfg)
	if err != nil {
		return nil, err
	}
	defer h.Close(context.Background())
	shown := strings.TrimPrefix(h.Proxy(), "environment: ") // see sinks.HTTP.Proxy
	if shown == "none" || shown == "none for this url" {
		return nil, nil
	}
	return url.Parse(shown)
}

// handshake connects to addr: TCP, then for scheme https the TLS
// handshake with the settings of tc (nil: the system's CAs), and says
// what was done.
func handshake(ctx context.Context, scheme, addr string, tc *tlsconf.Config) (string, error) {
	dialer := &net.Dialer{Timeout: preflightTimeout}
	if scheme != "https" {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return "", err
		}
		conn.Close()
		return "TCP handshake", nil
	}
	tlsCfg, err := tlsconf.Client(tc)
	if err != nil {
		return "", err
	}
	conn, err := (&tls.Dialer{NetDialer: dialer, Config: tlsCfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return "TCP and TLS handshake (" + tls.VersionName(conn.(*tls.Conn).ConnectionState().Version) + ")", nil
}

// hostPort returns the host:port of a URL, with port when it names none;
// never its user information, path or query.
func hostPort(rawURL, port string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(url not shown)"
	}
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// plural is n and noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
