package sources

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// A replay reads a bounded range of a log once (shaper replay): a Kafka
// topic without a consumer group (KafkaRange), or a JetStream stream
// through an ephemeral consumer (JetStreamRange). It moves nobody's
// position: it commits nothing and its consumer goes with it. Its Fetch
// returns io.EOF once the whole range has been handed out, and the
// pipeline then finishes what it holds.
//
// A replay settles a message only in its own books (rangeBooks): an Ack
// finishes it; a Nack leaves it without a final outcome (no dead-letter
// target, or the target failed, or a drain cut it short) and the replay
// reports it. Where to resume is, per partition (or for the stream), the
// first message not finished, or the first not read.

// Replay is a shaper.Source over a bounded range, with its progress.
type Replay interface {
	shaper.Source
	// Progress returns the counts so far.
	Progress() ReplayProgress
	// Resume returns the --from and --to of the replay of what is left:
	// from the first message of each partition (or of the stream) without
	// a final outcome, to where this range ends.
	Resume() (from, to string)
}

// ReplayProgress counts a replay's messages.
type ReplayProgress struct {
	// Total is how many messages the range held when the replay started,
	// before the --reason filter.
	Total int64 `json:"total"`
	// Read is how many have been read; Skipped how many of those were not
	// handed to the pipeline: dead letters of another pipeline, not of the
	// --reason asked for, or written without their payload. SkippedBy
	// counts them by why (SkipOtherPipeline, SkipOtherReason,
	// SkipPayloadOmitted).
	Read      int64            `json:"read"`
	Skipped   int64            `json:"skipped"`
	SkippedBy map[string]int64 `json:"skipped_by,omitempty"`
	// Finished is how many were settled with a final outcome (acked);
	// Unfinished how many were nacked: they have none in this replay.
	Finished   int64 `json:"finished"`
	Unfinished int64 `json:"unfinished"`
	// Places is, per partition (its number) or stream (its name), how
	// many messages were handed to the pipeline; Reasons, per
	// Shaper-Reason, how many of the pipeline's own dead letters were read
	// (with --dead-letters).
	Places  map[string]int64 `json:"places,omitempty"`
	Reasons map[string]int64 `json:"reasons,omitempty"`
	// Exhausted reports that the whole range has been read.
	Exhausted bool `json:"exhausted"`
}

// ReplayOptions are what a replay reads besides its range.
type ReplayOptions struct {
	// From and To bound the range: From is the first message in it, To the
	// first one past it.
	From, To Bound
	// DeadLetters reads dead-letter records (see AsDeadLetter) of the
	// pipeline called Pipeline, which it requires: a record whose
	// Shaper-Pipeline is another, or missing, is skipped (see
	// OwnDeadLetter). Reason, when set, keeps only those of that
	// Shaper-Reason.
	DeadLetters bool
	Pipeline    string
	Reason      string
}

// Why a replay passes over a record it read (ReplayProgress.SkippedBy).
const (
	// SkipOtherPipeline is a dead letter whose Shaper-Pipeline is not the
	// pipeline's name, or is missing: its owner is another pipeline, or
	// unknown, so its receiver is not this pipeline's to choose.
	SkipOtherPipeline = "other_pipeline"
	// SkipOtherReason is a dead letter not of the --reason asked for.
	SkipOtherReason = "other_reason"
	// SkipPayloadOmitted is a dead letter written without its payload.
	SkipPayloadOmitted = "payload_omitted"
)

// BoundError is a --from or --to the log cannot have, such as a
// partition the topic does not have: the operator's mistake, not the
// broker's.
type BoundError struct {
	Flag    string // --from or --to
	Problem string
}

func (e *BoundError) Error() string { return e.Flag + ": " + e.Problem }

// minBoundTime and maxBoundTime are the times a bound may name: brokers
// keep times as milliseconds (Kafka, where negative ones are sentinels)
// or nanoseconds (JetStream) since 1970 in an int64.
var (
	minBoundTime = time.Unix(0, 0).UTC()
	maxBoundTime = time.Unix(0, math.MaxInt64).UTC()
)

// CheckTime returns an error when b is a time before 1970-01-01T00:00:00Z
// or more than a day after now: no message is stored then, and a broker
// cannot be asked for it.
func (b Bound) CheckTime(now time.Time) error {
	if b.Kind != BoundTime {
		return nil
	}
	switch t := b.Time; {
	case t.Before(minBoundTime):
		return fmt.Errorf("%s is before %s", t.Format(time.RFC3339Nano), minBoundTime.Format(time.RFC3339))
	case t.After(now.Add(24 * time.Hour)):
		return fmt.Errorf("%s is more than a day after now (%s)", t.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// check returns the first problem of o that a broker cannot answer: a
// time outside what brokers store (the caller checks the tighter bounds
// of CheckTime), or dead letters of no pipeline.
func (o ReplayOptions) check() error {
	for _, b := range []struct {
		flag  string
		bound Bound
	}{{"--from", o.From}, {"--to", o.To}} {
		if b.bound.Kind == BoundTime && (b.bound.Time.Before(minBoundTime) || b.bound.Time.After(maxBoundTime)) {
			return &BoundError{Flag: b.flag, Problem: fmt.Sprintf("%s is outside %s to %s", b.bound.Time.Format(time.RFC3339Nano), minBoundTime.Format(time.RFC3339), maxBoundTime.Format(time.RFC3339))}
		}
	}
	if o.DeadLetters && o.Pipeline == "" {
		return errors.New("dead letters are read for a pipeline: its name is required")
	}
	return nil
}

// BoundKind is what a Bound names.
type BoundKind int

// Kinds of Bound.
const (
	// BoundLog is the start of the log (From) or its end when the replay
	// starts (To).
	BoundLog BoundKind = iota
	// BoundTime is the first message stored at or after Time.
	BoundTime
	// BoundOffset is a Kafka offset: Offsets per partition, Offset for
	// every partition not listed (or, with AllPartitions false, the log's
	// start or end for them).
	BoundOffset
	// BoundSeq is a JetStream stream sequence.
	BoundSeq
)

// Bound is one end of a replay's range, as --from and --to give it: "" (the
// log's start or end), an RFC 3339 time, offset:N (every Kafka partition),
// offset:P=N,P=N (those partitions), or seq:N (JetStream).
type Bound struct {
	Kind          BoundKind
	Time          time.Time
	Offset        int64
	AllPartitions bool
	Offsets       map[int]int64
	Seq           uint64
}

// ParseBound parses a --from or --to.
func ParseBound(s string) (Bound, error) {
	switch {
	case s == "":
		return Bound{}, nil
	case strings.HasPrefix(s, "seq:"):
		n, err := strconv.ParseUint(s[len("seq:"):], 10, 64)
		if err != nil || n == 0 {
			return Bound{}, fmt.Errorf("%q: want seq:N with N a stream sequence >= 1", s)
		}
		return Bound{Kind: BoundSeq, Seq: n}, nil
	case strings.HasPrefix(s, "offset:"):
		rest := s[len("offset:"):]
		if !strings.Contains(rest, "=") {
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || n < 0 {
				return Bound{}, fmt.Errorf("%q: want offset:N with N an offset >= 0, or offset:P=N,P=N per partition", s)
			}
			return Bound{Kind: BoundOffset, Offset: n, AllPartitions: true}, nil
		}
		b := Bound{Kind: BoundOffset, Offsets: map[int]int64{}}
		for _, part := range strings.Split(rest, ",") {
			ps, ns, _ := strings.Cut(part, "=")
			p, perr := strconv.Atoi(ps)
			n, nerr := strconv.ParseInt(ns, 10, 64)
			if perr != nil || nerr != nil || p < 0 || n < 0 {
				return Bound{}, fmt.Errorf("%q: %q: want P=N, a partition and an offset", s, part)
			}
			if _, dup := b.Offsets[p]; dup {
				return Bound{}, fmt.Errorf("%q: partition %d given twice", s, p)
			}
			b.Offsets[p] = n
		}
		return b, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Bound{}, fmt.Errorf("%q: want an RFC 3339 time (2026-11-30T14:00:00Z), offset:N, offset:P=N,P=N or seq:N", s)
	}
	return Bound{Kind: BoundTime, Time: t}, nil
}

// offsetOf returns the offset b gives partition p, and false when b does
// not name one for it.
func (b Bound) offsetOf(p int) (int64, bool) {
	if n, ok := b.Offsets[p]; ok {
		return n, true
	}
	return b.Offset, b.AllPartitions
}

// AsDeadLetter turns m, a dead-letter record read back, into the message
// that was dead-lettered, and returns its Shaper-Reason:
//   - its ID is the one it was first sent with, so the receiver can drop
//     the repeat: Shaper-Id, else the original Nats-Msg-Id, else
//     Shaper-Source;
//   - its Origin is the original's (Shaper-Source), so a dead letter of it
//     points there again;
//   - its Attempts are the Shaper-Attempts made before, so a dead letter
//     of it counts on;
//   - its Header loses every Shaper-* header and the Nats-Msg-Id, which
//     are the dead letter's, not the message's: none is sent.
//
// omitted reports a dead letter written without its payload (too large for
// the dead-letter target; Shaper-Payload-Omitted): it cannot be replayed
// from here, and Shaper-Source says where the original is.
func AsDeadLetter(m *shaper.Message) (reason string, omitted bool) {
	get := func(name string) string { return headerValue(m.Header, name) }
	reason = get("Shaper-Reason")
	omitted = get("Shaper-Payload-Omitted") != ""
	src := get("Shaper-Source")
	for _, id := range []string{get("Shaper-Id"), get("Nats-Msg-Id"), src} {
		if id != "" {
			m.ID = id
			break
		}
	}
	if src != "" {
		m.Origin = src
	}
	if n, err := strconv.Atoi(get("Shaper-Attempts")); err == nil && n > 0 {
		m.Attempts = n
	}
	if len(m.Header) > 0 {
		h := make(map[string][]string, len(m.Header))
		for k, v := range m.Header {
			if len(k) >= len("Shaper-") && strings.EqualFold(k[:len("Shaper-")], "Shaper-") || strings.EqualFold(k, "Nats-Msg-Id") {
				continue
			}
			h[k] = v
		}
		m.Header = h
	}
	return reason, omitted
}

// OwnDeadLetter reports whether m, a dead-letter record read back before
// AsDeadLetter, is one of pipeline's: its Shaper-Pipeline is pipeline.
// One without Shaper-Pipeline is nobody's: shaper writes it on every dead
// letter, so its owner is unknown, and its receiver may not be this
// pipeline's.
func OwnDeadLetter(m *shaper.Message, pipeline string) bool {
	owner := headerValue(m.Header, "Shaper-Pipeline")
	return owner != "" && owner == pipeline
}

// headerValue returns the first value of header name in h, whatever its
// case, or "".
func headerValue(h map[string][]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// rangeBooks keeps a replay's books: per place (a partition, or the
// stream), the messages read and not finished, in read order, so that the
// first of them is where a resumed replay starts.
type rangeBooks struct {
	opts   ReplayOptions
	format func(pos map[string]int64) string // --from/--to text for positions by place

	mu       sync.Mutex
	progress ReplayProgress
	places   map[string]*placeBooks
}

// placeBooks are one place's books. Positions are Kafka offsets or stream
// sequences; end is the first past the range.
type placeBooks struct {
	name       string
	next, end  int64 // the next position to read; the first past the range
	total      int64 // how many messages the range holds
	unfinished unfinished[rangeReceipt, *rangeReceipt]
}

func newRangeBooks(opts ReplayOptions, format func(map[string]int64) string) *rangeBooks {
	return &rangeBooks{opts: opts, format: format, places: map[string]*placeBooks{},
		progress: ReplayProgress{Places: map[string]int64{}, Reasons: map[string]int64{}, SkippedBy: map[string]int64{}}}
}

// place adds a place whose range is [from, end).
func (b *rangeBooks) place(name string, from, end int64) *placeBooks {
	b.mu.Lock()
	defer b.mu.Unlock()
	pb := &placeBooks{name: name, next: from, end: max(end, from)}
	pb.total = pb.end - from
	b.places[name] = pb
	b.progress.Total += pb.total
	return pb
}

// count sets how many messages pb's range holds, where that is not
// end-from: a stream's range read through a subject filter, or with gaps.
func (b *rangeBooks) count(pb *placeBooks, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.progress.Total += total - pb.total
	pb.total = total
}

// read books m, read at pos of pb, and returns it with its receipt, or
// nil when the replay passes over it (a dead letter of another pipeline,
// the --reason filter, a dead letter without its payload). pause, when not
// nil, is the receipt's Pause.
func (b *rangeBooks) read(pb *placeBooks, pos int64, m *shaper.Message, pause func() func()) *shaper.Message {
	skip, reason := "", ""
	own := true
	if b.opts.DeadLetters {
		if own = OwnDeadLetter(m, b.opts.Pipeline); !own {
			skip = SkipOtherPipeline
		} else {
			var omitted bool
			reason, omitted = AsDeadLetter(m)
			switch {
			case omitted:
				skip = SkipPayloadOmitted
			case b.opts.Reason != "" && reason != b.opts.Reason:
				skip = SkipOtherReason
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	pb.next = pos + 1
	b.progress.Read++
	if b.opts.DeadLetters && own {
		b.progress.Reasons[reason]++
	}
	if skip != "" {
		b.progress.Skipped++
		b.progress.SkippedBy[skip]++
		return nil
	}
	b.progress.Places[pb.name]++
	r := &rangeReceipt{books: b, place: pb, pos: pos, pause: pause}
	pb.unfinished.push(r)
	m.Receipt = r
	return m
}

// done reports whether pb's range has been read to its end.
func (pb *placeBooks) done() bool { return pb.next >= pb.end }

// exhausted records that every place has been read.
func (b *rangeBooks) exhausted() {
	b.mu.Lock()
	b.progress.Exhausted = true
	b.mu.Unlock()
}

// Progress returns the counts so far.
func (b *rangeBooks) Progress() ReplayProgress {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.progress
	p.Places, p.Reasons, p.SkippedBy = maps.Clone(p.Places), maps.Clone(p.Reasons), maps.Clone(p.SkippedBy)
	return p
}

// Resume returns the --from and --to that replay what is left.
func (b *rangeBooks) Resume() (from, to string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	froms, ends := map[string]int64{}, map[string]int64{}
	for name, pb := range b.places {
		froms[name], ends[name] = pb.next, pb.end
		if first := pb.unfinished.first; first != nil {
			froms[name] = first.pos
		}
	}
	return b.format(froms), b.format(ends)
}

// formatOffsets is a --from or --to of Kafka offsets by partition.
func formatOffsets(pos map[string]int64) string {
	parts := slices.Collect(maps.Keys(pos))
	slices.SortFunc(parts, func(a, c string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(c)
		return x - y
	})
	var sb strings.Builder
	sb.WriteString("offset:")
	for i, p := range parts {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%s=%d", p, pos[p])
	}
	return sb.String()
}

// formatSeq is a --from or --to of the one stream's sequence.
func formatSeq(pos map[string]int64) string {
	for _, n := range pos {
		return "seq:" + strconv.FormatInt(max(n, 1), 10)
	}
	return ""
}

// rangeReceipt settles a replayed message in the replay's books.
type rangeReceipt struct {
	books   *rangeBooks
	place   *placeBooks
	pos     int64
	pause   func() func()
	list    unfinishedLinks[rangeReceipt] // in the place's list of those not finished
	settled bool
}

func (r *rangeReceipt) links() *unfinishedLinks[rangeReceipt] { return &r.list }

// Ack finishes the message: it leaves the place's list.
func (r *rangeReceipt) Ack(context.Context) error { return r.settle(true) }

// Nack records that the message has no final outcome in this replay; it
// stays in the place's list, so a resumed replay starts at or before it.
// A replay reads its range once: nothing is redelivered.
func (r *rangeReceipt) Nack(context.Context, time.Duration) error { return r.settle(false) }

// settle books r's outcome, finished or not, once; a second outcome returns
// ErrAlreadySettled.
func (r *rangeReceipt) settle(finished bool) error {
	b := r.books
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.settled {
		return ErrAlreadySettled
	}
	r.settled = true
	if !finished {
		b.progress.Unfinished++
		return nil
	}
	b.progress.Finished++
	r.place.unfinished.remove(r)
	return nil
}

// Pause stops the source handing out what follows the message from its
// place while the message's key has no room (shaper.Pausable).
func (r *rangeReceipt) Pause() (resume func()) { return r.pause() }

// pauses is one place's pause count (shaper.Pausable): the place hands
// out nothing while it is above zero. Pauses nest; each resume counts once.
type pauses struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed and replaced when n goes to or from zero
}

func newPauses() *pauses { return &pauses{changed: make(chan struct{})} }

// pause adds a pause and returns the function that takes it away, once.
func (p *pauses) pause() (resume func()) {
	p.mu.Lock()
	p.n++
	if p.n == 1 {
		p.flip()
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.n--
			if p.n == 0 {
				p.flip()
			}
			p.mu.Unlock()
		})
	}
}

func (p *pauses) flip() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state reports whether the place is paused, and a channel closed at the
// next change.
func (p *pauses) state() (paused bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n > 0, p.changed
}
