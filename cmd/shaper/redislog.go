package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
