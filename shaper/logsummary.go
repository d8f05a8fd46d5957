package shaper

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// summaryWindow is the shortest time between two summary lines of one kind
// of event (see summaryLog).
const summaryWindow = 10 * time.Second

// summaryLog writes the events that happen to messages one at a time (a
// dead letter, an expiry dropped, a nack for want of a dead-letter target,
// a failed ack) so that an outage, which brings thousands of them, does
// not flood the log. Each event is one line at DEBUG with everything about
// its message. At the event's own level there is one summary line per
// kind (the line's message and the reason) per summaryWindow, with count,
// the events since the previous summary line of that kind, this one
// included; and the last message's id and error. The first event of a
// kind after a quiet window is written at once, with count 1.
//
// Nothing runs in the background: an event reads the pipeline's clock and
// writes the summary lines of every kind whose window has passed, and
// flush writes what is still counted when Run returns. Counts written add
// up to the events recorded.
//
// summaryLog is safe for concurrent use by multiple goroutines.
type summaryLog struct {
	log   *slog.Logger
	clock Clock

	mu    sync.Mutex // guards kinds
	kinds map[summaryKind]*summaryCount
}

// summaryKind is what a summary line counts: the line's message and the
// reason (a dead letter's, a nack's, an outcome).
type summaryKind struct {
	msg    string
	reason string
}

// summaryCount is one kind's events since its last summary line.
type summaryCount struct {
	level   slog.Level
	written time.Time // when the last summary line was written; zero: never
	count   int       // events since, not written yet
	lastID  string
	lastErr error
}

// summaryLine is one summary line to write, taken under the lock and
// written after it.
type summaryLine struct {
	kind summaryKind
	summaryCount
	over time.Duration // since the previous line of the kind; 0: none before
}

func newSummaryLog(log *slog.Logger, clock Clock) *summaryLog {
	return &summaryLog{log: log, clock: clock, kinds: make(map[summaryKind]*summaryCount)}
}

// event records that msg happened to the message id for reason, with err
// (nil if none): a DEBUG line with args, and the summary lines that are
// due at level.
func (s *summaryLog) event(level slog.Level, msg, reason, id string, err error, args ...any) {
	ctx := context.Background()
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug(msg, append([]any{"id", id, "reason", reason, "err", err}, args...)...)
	}
	now := s.clock.Now()
	kind := summaryKind{msg, reason}
	s.mu.Lock()
	c := s.kinds[kind]
	if c == nil {
		c = &summaryCount{}
		s.kinds[kind] = c
	}
	c.level, c.lastID, c.lastErr = level, id, err
	c.count++
	lines := s.dueLocked(now, false)
	s.mu.Unlock()
	s.write(lines)
}

// flush writes a summary line for every kind with events not written yet.
func (s *summaryLog) flush() {
	s.mu.Lock()
	lines := s.dueLocked(s.clock.Now(), true)
	s.mu.Unlock()
	s.write(lines)
}

// dueLocked takes the summary lines due at now: of every kind with events
// counted whose window has passed, or, with all, of every kind with events
// counted. It requires that s.mu is held.
func (s *summaryLog) dueLocked(now time.Time, all bool) []summaryLine {
	var lines []summaryLine
	for kind, c := range s.kinds {
		if c.count == 0 || !all && !c.written.IsZero() && now.Sub(c.written) < summaryWindow {
			continue
		}
		line := summaryLine{kind: kind, summaryCount: *c}
		if !c.written.IsZero() {
			line.over = now.Sub(c.written)
		}
		c.written, c.count = now, 0
		lines = append(lines, line)
	}
	return lines
}

func (s *summaryLog) write(lines []summaryLine) {
	for _, l := range lines {
		args := []any{"reason", l.kind.reason, "count", l.count}
		if l.over > 0 {
			args = append(args, "over", l.over.Round(time.Millisecond))
		}
		args = append(args, "last_id", l.lastID)
		if l.lastErr != nil {
			args = append(args, "last_err", l.lastErr)
		}
		s.log.Log(context.Background(), l.level, l.kind.msg, args...)
	}
}

// pushbackLog counts the events of a gate (a throttle begins or ends, the
// breaker opens or closes) into summary lines, the same way summaryLog
// counts a message's: each event is a line at DEBUG; at the event's own
// level there is one line per kind (its message) per summaryWindow, with
// count, the events since the previous line of the kind, this one
// included, and the last event's fields. The first event of a kind after
// a quiet window is written at once, with count 1; the rest are written
// once summaryWindow has passed, at the gate's next event or look (due),
// whichever comes first. A sink that answers 429 Retry-After: 1 to
// everything thus writes two lines per window, not two per second.
//
// Its owner takes every line out (take) and writes it after releasing its
// lock. The zero value is ready for use; pushbackLog is not safe for
// concurrent use: its gate's lock guards it.
type pushbackLog struct {
	kinds map[string]*pushbackCount
	out   []pushbackLine // to write, in order
}

// pushbackCount is one kind's events since its last summary line.
type pushbackCount struct {
	level   slog.Level
	written time.Time // when the last summary line was written; zero: never
	count   int       // events since, not written yet
	args    []any     // the last event's fields
}

// pushbackLine is a line to write.
type pushbackLine struct {
	level slog.Level
	msg   string
	args  []any
}

// event records an event msg at now, at level, with the fields args.
func (l *pushbackLog) event(now time.Time, level slog.Level, msg string, args ...any) {
	l.out = append(l.out, pushbackLine{slog.LevelDebug, msg, args})
	if l.kinds == nil {
		l.kinds = make(map[string]*pushbackCount)
	}
	c := l.kinds[msg]
	if c == nil {
		c = &pushbackCount{}
		l.kinds[msg] = c
	}
	c.level, c.args = level, args
	c.count++
	l.due(now)
}

// due takes the summary lines due at now: of every kind with events
// counted and no line within the last summaryWindow.
func (l *pushbackLog) due(now time.Time) {
	for msg, c := range l.kinds {
		if c.count == 0 || !c.written.IsZero() && now.Sub(c.written) < summaryWindow {
			continue
		}
		args := []any{"count", c.count}
		if !c.written.IsZero() {
			args = append(args, "over", now.Sub(c.written).Round(time.Millisecond))
		}
		l.out = append(l.out, pushbackLine{c.level, msg, append(args, c.args...)})
		c.written, c.count = now, 0
	}
}

// take returns the lines to write, and forgets them.
func (l *pushbackLog) take() []pushbackLine {
	out := l.out
	l.out = nil
	return out
}
