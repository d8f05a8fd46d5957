package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// logger returns the process's logger, writing to w at the level and in
// the format of --log-level and --log-format, with durations as Go strings
// (logAttr) and go-redis's own lines among its records (logRedisTo).
func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(g.logLevel)) // check admitted only the names slog knows
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: logAttr}
	log := slog.New(slog.NewTextHandler(w, opts))
	if g.logFormat == "json" {
		log = slog.New(slog.NewJSONHandler(w, opts))
	}
	logRedisTo(log) // go-redis's logger is one per process
	return log, nil
}

// logAttr rewrites an attribute before a log handler writes it, at the top
// level or inside a group. A duration becomes its Go string ("30s",
// "1.5ms"), the form the config takes: the JSON handler would write it as
// a count of nanoseconds (the text handler already writes the string).
func logAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// logRedisTo sends go-redis's own log lines into log, as records with
// component=redis, for the rest of the process. Without it go-redis prints
// them to stderr as plain text ("redis: 2026/01/02 ... pool.go:770: ..."),
// past the structured log. go-redis v9 has no logger per client, only the
// package-level one that redis.SetLogger replaces, so package main, which
// owns the process, sets it where it makes the process's logger.
func logRedisTo(log *slog.Logger) {
	redis.SetLogger(redisLog{log.With("component", "redis")})
}

// redisLog is go-redis's logger interface over a slog.Logger.
type redisLog struct {
	log *slog.Logger
}

// Printf formats one go-redis line and logs it at the level redisLevel
// gives its format, without the "redis: " prefix the component replaces.
func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	level := redisLevel(format)
	if !l.log.Enabled(ctx, level) {
		return // spares the formatting of lines nobody reads
	}
	l.log.Log(ctx, level, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

// redisLevel returns the level of a go-redis line, from its format.
// Failures to reach Redis are Debug: go-redis repeats them for every dial,
// and the shared limiter already reports an unreachable Redis once, as its
// fallback (a warning) and its return (info). Sentinel news is Info.
// Anything else go-redis says is out of the ordinary (a hook error, a
// panic, unread data on a connection) and is a warning.
func redisLevel(format string) slog.Level {
	switch {
	case strings.Contains(format, "failed to dial"),
		strings.Contains(format, "failed to get a usable connection"),
		strings.HasPrefix(format, "sentinel: ") && strings.Contains(format, "failed"):
		return slog.LevelDebug
	case strings.HasPrefix(format, "sentinel: "):
		return slog.LevelInfo
	}
	return slog.LevelWarn
}
