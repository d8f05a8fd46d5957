package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// buildParts wires one pipeline's config to its source, sink, dead-letter
// target and limiter. On error it returns what it built, for the caller to
// close.
func buildParts(pc config.Pipeline, k tuning.Knobs, log *slog.Logger) (shaper.Parts, error) {
	parts, err := buildDelivery(pc, k, log)
	if err != nil {
		return parts, err
	}
	if parts.Source, err = buildSource(pc, k, "shaper-"+pc.Name, log.With("pipeline", pc.Name)); err != nil {
		return parts, fmt.Errorf("source: %w", err)
	}
	return parts, nil
}

// buildDelivery wires the parts of one pipeline but its source: the
// limiters, the sink and the dead-letter target. A replay gives them a
// source of its own. On error it returns what it built, for the caller
// to close.
func buildDelivery(pc config.Pipeline, k tuning.Knobs, log *slog.Logger) (parts shaper.Parts, err error) {
	name := "shaper-" + pc.Name
	log = log.With("pipeline", pc.Name)
	if parts.Limiter, err = buildLimiter(pc.Rate, log); err != nil {
		return parts, fmt.Errorf("rate: %w", err)
	}
	if parts.Sink, err = buildSink(pc.Sink, k, name, log); err != nil {
		return parts, fmt.Errorf("sink: %w", err)
	}
	if dl := pc.DeadLetter; dl != nil {
		if parts.DeadLetter, err = buildDeadLetter(*dl, name+"-dead-letter"); err != nil {
			return parts, fmt.Errorf("dead_letter: %w", err)
		}
	}
	if parts.KeyLimiter, err = buildKeyLimiter(pc, parts.Limiter, log); err != nil {
		return parts, fmt.Errorf("rate.per_key: %w", err)
	}
	if err = buildDestinationLimiter(pc, &parts, log); err != nil {
		return parts, fmt.Errorf("rate.adaptive: %w", err)
	}
	return parts, nil
}

// buildLimiter returns the local limiter, or with rate.shared the Redis-shared
// one, which then owns its Redis client.
func buildLimiter(cfg config.Rate, log *slog.Logger) (shaper.Limiter, error) {
	local := limiter.Config{Mode: limiter.Mode(cfg.Mode), Limit: cfg.Limit, Burst: *cfg.Burst, Warmup: cfg.Warmup}
	if cfg.Shared == nil {
		return limiter.New(local, time.Now())
	}
	return limiter.NewSharedFrom(*cfg.Shared, local, log, time.Now())
}

// buildKeyLimiter returns what makes each key's own limiter: shared through
// the pipeline's shared limiter's Redis client when pc says so, else one
// on this replica; nil without rate.per_key.
func buildKeyLimiter(pc config.Pipeline, lim shaper.Limiter, log *slog.Logger) (func(string, time.Time) shaper.Limiter, error) {
	cfg, shared := pc.SharedKeys()
	owned, ok := lim.(*limiter.OwnedShared)
	if !shared || !ok {
		return pc.Rate.KeyLimiter(), nil
	}
	cfg.Logger = log
	keys, err := owned.Keys(cfg)
	if err != nil {
		return nil, err
	}
	return func(key string, now time.Time) shaper.Limiter { return keys.For(key, now) }, nil
}

// buildDestinationLimiter sets what makes each destination's own limiter
// under rate.adaptive: shared through the pipeline's shared limiter's
// Redis client when pc says so, else one on this replica; none when the
// adaptive rate moves the pipeline's shared limit. When the destinations
// are the lanes of shared per-key limits, their limiters are those, and
// the lanes get none of their own.
func buildDestinationLimiter(pc config.Pipeline, parts *shaper.Parts, log *slog.Logger) error {
	cfg, lanes, shared := pc.SharedDestinations()
	owned, ok := parts.Limiter.(*limiter.OwnedShared)
	switch {
	case pc.AdaptsSharedLimit():
		return nil
	case !shared || !ok:
		parts.DestinationLimiter = pc.Rate.DestinationLimiter()
		return nil
	}
	cfg.Logger = log
	keys, err := owned.Keys(cfg)
	if err != nil {
		return err
	}
	parts.DestinationLimiter = func(name string, now time.Time) shaper.Limiter { return keys.For(name, now) }
	if lanes {
		parts.KeyLimiter = nil
	}
	return nil
}

// buildSink, buildDeadLetter and buildSource return a nil interface, never
// an interface holding a nil pointer, when the constructor fails.

func buildSink(cfg config.Sink, k tuning.Knobs, name string, log *slog.Logger) (shaper.Sink, error) {
	switch {
	case cfg.HTTP != nil:
		warnPlainHTTP(cfg.HTTP.URL, log)
		hc := *cfg.HTTP
		hc.WrapConn = k.Wrap
		h, err := sinks.NewHTTP(hc)
		if err != nil {
			return nil, err
		}
		// Says whether callbacks, their credentials and signatures go
		// through a proxy; never shows the proxy's credentials.
		log.Info("sink.http proxy", "proxy", h.Proxy())
		return h, nil
	case cfg.Kafka != nil:
		return orNil(sinks.NewKafka(cfg.Kafka.KafkaPublisherConfig, name))
	default:
		return orNil(sinks.NewNATS(cfg.NATS.NATSPublisherConfig, name))
	}
}

// warnPlainHTTP logs a warning when url is plain http:// to a host other
// than loopback: headers (Authorization), signatures and payloads would
// cross the network in the clear. Only scheme and host are logged: the
// path and query may hold a token.
func warnPlainHTTP(rawURL string, log *slog.Logger) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || check.IsLoopback(u.Hostname()) {
		return
	}
	log.Warn("sink.http.url is plain http:// to a host other than loopback: requests, their headers and signatures travel unencrypted; use https://",
		"sink", "http://"+u.Host)
}

func buildDeadLetter(cfg config.DeadLetter, name string) (shaper.Sink, error) {
	if cfg.Kafka != nil {
		return orNil(sinks.NewKafka(*cfg.Kafka, name))
	}
	return orNil(sinks.NewNATS(*cfg.NATS, name))
}

// buildSource picks the source by config: Kafka; NATS with a stream is
// JetStream (at-least-once); NATS without one is core NATS (at-most-once).
func buildSource(pc config.Pipeline, k tuning.Knobs, name string, log *slog.Logger) (shaper.Source, error) {
	cfg, capacity := pc.Source, pc.Bucket.Capacity
	if cfg.NATS != nil {
		nc := *cfg.NATS
		nc.WrapConn = k.Wrap
		cfg.NATS = &nc
	}
	switch {
	case cfg.Kafka != nil:
		return sourceOrNil(sources.NewKafka(*cfg.Kafka, capacity, name, log))
	case cfg.NATS.Stream != "":
		return sourceOrNil(sources.NewJetStream(*cfg.NATS, pc.Pending(), name, log))
	default:
		return sourceOrNil(sources.NewCoreNATS(*cfg.NATS, capacity, name, log))
	}
}

// sourceOrNil converts a constructor's result to a shaper.Source without
// wrapping a nil pointer.
func sourceOrNil[S shaper.Source](s S, err error) (shaper.Source, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// orNil converts a constructor's result to a shaper.Sink without wrapping a
// nil pointer.
func orNil[S shaper.Sink](s S, err error) (shaper.Sink, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}
