package sinks

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseRetryAfter checks ParseRetryAfter on arbitrary header values and
// clocks: it never panics; what it returns is never before now (zero when
// it refuses); a number of seconds gives exactly now plus that many seconds
// and formats back to itself; and an HTTP-date, written by the server's
// own formatting, reads back as that date, or now when it is past.
//
// now stays within about 544 years of 1970, as a real clock does: that
// keeps the result inside what time.Time and http.TimeFormat represent.
// The seed corpus is testdata/fuzz/FuzzParseRetryAfter.
func FuzzParseRetryAfter(f *testing.F) {
	f.Add("120", int64(1772366400), uint32(0), int64(300))
	f.Fuzz(func(t *testing.T, v string, nowSec int64, nowNsec uint32, delta int64) {
		now := time.Unix(nowSec%(1<<34), int64(nowNsec%1e9))

		at, ok := ParseRetryAfter(v, now)
		if !ok {
			if !at.IsZero() {
				t.Fatalf("ParseRetryAfter(%q) = %v, false; want the zero time with false", v, at)
			}
		} else if at.Before(now) {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v: before now", v, now, at)
		}

		if s := strings.TrimSpace(v); isDigits(s) {
			const maxSeconds = math.MaxInt64 / int64(time.Second)
			if !ok {
				t.Fatalf("ParseRetryAfter(%q) refused delay-seconds", v)
			}
			d := at.Sub(now)
			if d%time.Second != 0 || d < 0 {
				t.Fatalf("ParseRetryAfter(%q) = now + %v; want whole seconds", v, d)
			}
			if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs <= maxSeconds && d != time.Duration(secs)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = now + %v; want now + %ds", v, d, secs)
			}
			back, ok := ParseRetryAfter(strconv.FormatInt(int64(d/time.Second), 10), now)
			if !ok || !back.Equal(at) {
				t.Fatalf("delay %q read as now + %v, which reads back as %v, %v", v, d, back, ok)
			}
		} else if ok && at.After(now) {
			// A date in the future: the server's formatting of it reads
			// back the same.
			back, ok := ParseRetryAfter(at.UTC().Format(http.TimeFormat), now)
			if !ok || !back.Equal(at) {
				t.Fatalf("date %q read as %v, which formats and reads back as %v, %v", v, at, back, ok)
			}
		}

		// Round trips from the other side: seconds and dates written out.
		secs := int64(uint32(delta))
		if got, ok := ParseRetryAfter(strconv.FormatInt(secs, 10), now); !ok || !got.Equal(now.Add(time.Duration(secs)*time.Second)) {
			t.Fatalf("ParseRetryAfter(%d) = %v, %v; want now + %ds", secs, got, ok, secs)
		}
		date := now.Add(time.Duration(delta%(1<<32)) * time.Second).Truncate(time.Second)
		want := date
		if date.Before(now) {
			want = now
		}
		if got, ok := ParseRetryAfter(date.UTC().Format(http.TimeFormat), now); !ok || !got.Equal(want) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", date.UTC().Format(http.TimeFormat), got, ok, want)
		}
	})
}
