package sources

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Commit metadata: the offsets of a partition finished above its committed
// offset.
//
// A committed offset says only that every offset below it is finished. When
// one message holds the mark (a retry pending at a drain, a nack, a request
// cut short by a rebalance), everything its partition finished after it would
// come again from the committed offset. So every commit also stores, in the
// metadata string that Kafka keeps with each committed offset, which offsets
// above it are finished; the next owner of the partition (this process after
// a restart, or another member after a rebalance) skips them and delivers
// only the messages without a final outcome.
//
// The format is
//
//	s1:<committed>:<skip>+<count>,<skip>+<count>,...
//
// read from the committed offset upward: skip offsets that are not finished
// (the first of them is the committed offset itself), then count finished
// ones, and so on; each number is decimal and at least 1. For example
// "s1:10:1+39,1+49" has offsets 11..49 and 51..99 finished above 10, which
// is not finished, nor is 50. Offsets past the last run are not known to be
// finished. The committed offset is repeated so that metadata left beside an
// offset that another tool moved is ignored.
//
// Kafka refuses metadata longer than offset.metadata.max.bytes (4096 by
// default), so the runs are written from the lowest offsets upward while
// they fit, and the rest is left out: those messages simply come again,
// which at-least-once allows. Metadata that is not in this format (written
// by another tool, or garbled) is ignored, and the reason logged: it never
// fails the source, and the partition is read from the committed offset.

const (
	// metadataPrefix starts the commit metadata of this format, version 1.
	metadataPrefix = "s1:"
	// kafkaMetadataMax is the most bytes of metadata committed per
	// partition: Kafka's default offset.metadata.max.bytes. A broker
	// configured lower refuses it (OFFSET_METADATA_TOO_LARGE); the source
	// then halves its limit (see commitTracker.shrinkMetadata).
	kafkaMetadataMax = 4096
	// kafkaMetadataMin is the smallest limit worth writing metadata under;
	// below it the source commits offsets alone.
	kafkaMetadataMin = 64
)

// offsetRange is the offsets from..to, both included.
type offsetRange struct {
	from, to int64
}

// metadataWriter encodes the finished runs above a committed offset, lowest
// first, into at most max bytes. Runs must come in increasing order; runs
// that touch or overlap are merged, and offsets at or below the base are
// left out (the base is never finished: it is the committed offset).
type metadataWriter struct {
	buf     []byte
	max     int
	cursor  int64 // the first offset after the last run written; the base at first
	runs    int   // runs written
	run     offsetRange
	pending bool // run is being extended
	full    bool // a run did not fit: the rest is left out
}

func newMetadataWriter(base int64, max int) *metadataWriter {
	w := &metadataWriter{max: max, cursor: base}
	w.buf = append(w.buf, metadataPrefix...)
	w.buf = strconv.AppendInt(w.buf, base, 10)
	w.buf = append(w.buf, ':')
	return w
}

// add records from..to as finished.
func (w *metadataWriter) add(from, to int64) {
	if w.full {
		return
	}
	if w.pending && from <= w.run.to+1 {
		w.run.to = max(w.run.to, to)
		return
	}
	w.flush()
	from = max(from, w.cursor+1) // a run starts after an offset that is not finished
	if from > to || w.full {
		return
	}
	w.run, w.pending = offsetRange{from: from, to: to}, true
}

// flush writes the pending run, or marks the writer full when it does not
// fit.
func (w *metadataWriter) flush() {
	if !w.pending || w.full {
		return
	}
	w.pending = false
	n := len(w.buf)
	if w.runs > 0 {
		w.buf = append(w.buf, ',')
	}
	w.buf = strconv.AppendInt(w.buf, w.run.from-w.cursor, 10)
	w.buf = append(w.buf, '+')
	w.buf = strconv.AppendInt(w.buf, w.run.to-w.run.from+1, 10)
	if len(w.buf) > w.max {
		w.buf, w.full = w.buf[:n], true
		return
	}
	w.runs++
	w.cursor = w.run.to + 1
}

// String returns the metadata, or "" when no run was written (nothing
// finished above the base, or not even the first run fits).
func (w *metadataWriter) String() string {
	w.flush()
	if w.runs == 0 {
		return ""
	}
	return string(w.buf)
}

// encodeFinished returns the metadata of a commit at base with the finished
// runs ranges (in increasing order), in at most max bytes.
func encodeFinished(base int64, ranges []offsetRange, max int) string {
	w := newMetadataWriter(base, max)
	for _, r := range ranges {
		w.add(r.from, r.to)
	}
	return w.String()
}

// parseFinished returns the finished runs that metadata md, committed with
// offset committed, records above it, lowest first; none when md is empty.
// Metadata that is not in this format (written by another tool, or garbled),
// or that was written for another offset, gives an error that says why, and
// no runs at all: the caller skips nothing, so nothing is lost.
func parseFinished(committed int64, md string) ([]offsetRange, error) {
	if md == "" {
		return nil, nil
	}
	rest, ok := strings.CutPrefix(md, metadataPrefix)
	if !ok {
		return nil, fmt.Errorf("not this source's format: no %q prefix", metadataPrefix)
	}
	baseText, runs, ok := strings.Cut(rest, ":")
	if !ok {
		return nil, errors.New("no committed offset before the runs")
	}
	base, err := strconv.ParseInt(baseText, 10, 64)
	switch {
	case err != nil || base < 0:
		return nil, fmt.Errorf("committed offset %q is not an offset", baseText)
	case base != committed:
		return nil, fmt.Errorf("written for offset %d, not for the committed offset %d", base, committed)
	case runs == "":
		return nil, errors.New("no runs")
	}
	var out []offsetRange
	cursor := base
	for i, item := range strings.Split(runs, ",") {
		r, err := parseRun(cursor, item)
		if err != nil {
			return nil, fmt.Errorf("run %d %q: %w", i+1, item, err)
		}
		out = append(out, r)
		if r.to == math.MaxInt64 {
			cursor = r.to // nothing can follow; a further run fails the checks
			continue
		}
		cursor = r.to + 1
	}
	return out, nil
}

// parseRun reads a run "<skip>+<count>" that follows cursor, the base or the
// first offset after the previous run.
func parseRun(cursor int64, item string) (offsetRange, error) {
	skipText, countText, ok := strings.Cut(item, "+")
	if !ok {
		return offsetRange{}, errors.New("not <skip>+<count>")
	}
	skip, err1 := strconv.ParseInt(skipText, 10, 64)
	count, err2 := strconv.ParseInt(countText, 10, 64)
	switch {
	case err1 != nil || err2 != nil:
		return offsetRange{}, errors.New("not <skip>+<count> in decimal")
	case skip < 1 || count < 1:
		return offsetRange{}, errors.New("skip and count must be at least 1")
	case skip > math.MaxInt64-cursor || count-1 > math.MaxInt64-cursor-skip:
		return offsetRange{}, errors.New("past the largest offset")
	}
	from := cursor + skip
	return offsetRange{from: from, to: from + count - 1}, nil
}

// truncateMetadata returns the longest prefix of md, metadata of this
// format, that holds whole runs and fits in max bytes; "" when not even one
// run fits.
func truncateMetadata(md string, max int) string {
	if len(md) <= max {
		return md
	}
	if max <= 0 {
		return ""
	}
	cut := strings.LastIndexByte(md[:max+1], ',') // md[max] may be the comma after a whole run
	if cut < 0 {
		return ""
	}
	return md[:cut]
}
