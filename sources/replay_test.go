package sources

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// bounds parses a --from and a --to into the options of a replay.
func bounds(t *testing.T, from, to string) ReplayOptions {
	t.Helper()
	var opts ReplayOptions
	var err error
	if opts.From, err = ParseBound(from); err != nil {
		t.Fatalf("ParseBound(%q): %v", from, err)
	}
	if opts.To, err = ParseBound(to); err != nil {
		t.Fatalf("ParseBound(%q): %v", to, err)
	}
	return opts
}

// checkUnacked checks a replay that has handed out its range and has
// none of it acked yet: the range held total messages, and resuming would
// replay it all again, from from to to.
func checkUnacked(t *testing.T, r Replay, total int64, from, to string) {
	t.Helper()
	if p := r.Progress(); p.Total != total {
		t.Errorf("Progress().Total = %d; want %d", p.Total, total)
	}
	if f, e := r.Resume(); f != from || e != to {
		t.Errorf("Resume() before any ack = %q, %q; want %s to %s", f, e, from, to)
	}
}

// readRange fetches up to max at a time until Fetch returns io.EOF, and
// returns what came. It fails the test on another error, on a Fetch of more
// than max or none, on messages returned with io.EOF, or if the end does not
// come within 20s. A second Fetch after io.EOF must return io.EOF too.
func readRange(t *testing.T, r shaper.Source, max int) []*shaper.Message {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []*shaper.Message
	for {
		msgs, err := fetch(r, max, time.Until(deadline))
		if errors.Is(err, io.EOF) {
			if len(msgs) != 0 {
				t.Errorf("Fetch returned %d messages with io.EOF; want none", len(msgs))
			}
			break
		}
		if err != nil {
			t.Fatalf("Fetch(%d) after %d messages: %v", max, len(got), err)
		}
		if len(msgs) < 1 || len(msgs) > max {
			t.Fatalf("Fetch(%d) returned %d messages; want 1..%d", max, len(msgs), max)
		}
		got = append(got, msgs...)
	}
	if msgs, err := fetch(r, max, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("Fetch after io.EOF = %d messages, %v; want io.EOF again", len(msgs), err)
	}
	return got
}

func TestParseBoundReadsEveryFormAndNamesTheInputItRefuses(t *testing.T) {
	tests := []struct {
		give string
		want Bound
	}{
		{"", Bound{}},
		{"2026-11-30T14:00:00Z", Bound{Kind: BoundTime, Time: time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)}},
		{"2026-11-30T15:00:00.5+01:00", Bound{Kind: BoundTime, Time: time.Date(2026, 11, 30, 14, 0, 0, 5e8, time.UTC)}},
		{"offset:0", Bound{Kind: BoundOffset, Offset: 0, AllPartitions: true}},
		{"offset:42", Bound{Kind: BoundOffset, Offset: 42, AllPartitions: true}},
		{"offset:3=7", Bound{Kind: BoundOffset, Offsets: map[int]int64{3: 7}}},
		{"offset:0=5,12=0", Bound{Kind: BoundOffset, Offsets: map[int]int64{0: 5, 12: 0}}},
		{"seq:1", Bound{Kind: BoundSeq, Seq: 1}},
		{"seq:18446744073709551615", Bound{Kind: BoundSeq, Seq: 1<<64 - 1}},
	}
	for _, tt := range tests {
		got, err := ParseBound(tt.give)
		if err != nil {
			t.Errorf("ParseBound(%q) = %v; want %+v", tt.give, err, tt.want)
			continue
		}
		if !got.Time.Equal(tt.want.Time) {
			t.Errorf("ParseBound(%q).Time = %v; want %v", tt.give, got.Time, tt.want.Time)
		}
		got.Time, tt.want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseBound(%q) = %+v; want %+v", tt.give, got, tt.want)
		}
	}

	bad := []struct {
		give, want string // want: in the error, besides the input
	}{
		{"offset:", "offset:N"},
		{"offset:-1", "offset:N"},
		{"offset:x", "offset:N"},
		{"offset:1.5", "offset:N"},
		{"offset:0=", "want P=N"},
		{"offset:=5", "want P=N"},
		{"offset:0=5,", "want P=N"},
		{"offset:0=-5", "want P=N"},
		{"offset:-1=5", "want P=N"},
		{"offset:0=5,0=6", "partition 0 given twice"},
		{"seq:", "seq:N"},
		{"seq:0", "seq:N"},
		{"seq:-3", "seq:N"},
		{"seq:x", "seq:N"},
		{"2026-11-30", "RFC 3339"},
		{"2026-11-30 14:00:00", "RFC 3339"},
		{"yesterday", "RFC 3339"},
		{"Offset:5", "RFC 3339"},
	}
	for _, tt := range bad {
		_, err := ParseBound(tt.give)
		if err == nil || !strings.Contains(err.Error(), `"`+tt.give+`"`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseBound(%q) = %v; want an error quoting it and saying %q", tt.give, err, tt.want)
		}
	}
}
