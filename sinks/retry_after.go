// This file parses a Retry-After header value, in seconds or as an HTTP
// date, into the time a StatusError carries.

package sinks

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter returns the time a Retry-After header value v asks for,
// given that the response arrived at now. It accepts delay-seconds (a
// non-negative decimal integer) and an HTTP-date in any form http.ParseTime
// knows. A date in the past gives now. A delay too long for a
// time.Duration is held to the longest one (about 292 years) rather than
// overflowing. Anything else, a negative number included, returns false.
func ParseRetryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if isDigits(v) {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > maxSeconds { // only digits: err is out of range
			secs = maxSeconds
		}
		return now.Add(time.Duration(secs) * time.Second), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	if at.Before(now) {
		return now, true
	}
	return at, true
}

// isDigits reports whether s is one or more ASCII decimal digits, the form
// of delay-seconds (strconv would also take a sign).
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
