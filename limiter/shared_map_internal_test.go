package limiter

import (
	"testing"
	"time"
)

// A lease is mapped to local time with the least clock offset seen, so a
// reply that came back slowly does not shift its lease onto the next one;
// an offset that contradicts a reply (the server's clock went back) is
// dropped.
func TestSharedMapsLeasesWithTheFastestRoundTrip(t *testing.T) {
	base := time.Now()
	const server = 1.7e15 // server microseconds at base
	type reply struct {
		after  time.Duration // recv, from base
		server time.Duration // the server's now, from server
		rtt    time.Duration
	}
	tests := []struct {
		name string
		give []reply
		want time.Duration // the last reply's now in local time, from base
	}{
		{"the first reply maps its now to when it came",
			[]reply{{0, 0, 40 * time.Microsecond}}, 0},
		{"a slow reply is mapped with the fast one's offset, aged by 100ppm",
			[]reply{{0, 0, 40 * time.Microsecond}, {time.Second + 40*time.Millisecond, time.Second, 41 * time.Millisecond}},
			time.Second + 104*time.Microsecond}, // aged over 1.04s
		{"a faster reply's offset replaces the kept one",
			[]reply{{0, 0, 5 * time.Millisecond}, {time.Second + time.Millisecond, time.Second + 3*time.Millisecond, 100 * time.Microsecond}},
			time.Second + time.Millisecond},
		{"the server's clock set back by a second: the kept offset goes",
			[]reply{{0, 0, 40 * time.Microsecond}, {time.Second, 0, 40 * time.Microsecond}},
			time.Second},
		{"a reply whose round trip spans the kept offset keeps it",
			[]reply{{0, 0, 40 * time.Microsecond}, {time.Second + 30*time.Millisecond, time.Second, 50 * time.Millisecond}, {2*time.Second + 10*time.Millisecond, 2 * time.Second, 20 * time.Millisecond}},
			2*time.Second + 201*time.Microsecond}, // aged over 1.03s, then 0.98s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Shared{}
			var got time.Time
			for _, r := range tt.give {
				got = s.mapLocked(server+float64(r.server.Microseconds()), base.Add(r.after), r.rtt)
			}
			if d := got.Sub(base); d < tt.want-time.Microsecond || d > tt.want+time.Microsecond {
				t.Errorf("mapLocked(last reply) = base+%v; want base+%v", d, tt.want)
			}
		})
	}
}
