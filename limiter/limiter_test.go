package limiter_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/limiter"
)

// TestMain checks that the package leaves no goroutine behind: the limiter
// is computed from timestamps and must never start one.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start is the fake clock's origin; every test passes times relative to it.
var start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// at returns the fake time d after start.
func at(d time.Duration) time.Time { return start.Add(d) }

// newLimiter returns a limiter for cfg started at start, or fails the test.
func newLimiter(t testing.TB, cfg limiter.Config) *limiter.Limiter {
	t.Helper()
	l, err := limiter.New(cfg, start)
	if err != nil {
		t.Fatalf("New(%+v) = %v; want no error", cfg, err)
	}
	return l
}

// everyKind returns a config of each kind of schedule the limiter computes,
// at limit per second: leaky, token with a burst, and leaky still warming up
// (for an hour, longer than any test runs). A promise every kind keeps is
// checked against these, so a new kind is one more row here.
func everyKind(limit float64) []limiter.Config {
	return []limiter.Config{
		{Mode: limiter.Leaky, Limit: limit, Burst: 1},
		{Mode: limiter.Token, Limit: limit, Burst: 3},
		{Mode: limiter.Leaky, Limit: limit, Burst: 1, Warmup: time.Hour},
	}
}

// interval returns 1/limit as a duration, truncated to whole nanoseconds.
func interval(limit float64) time.Duration {
	return time.Duration(1e9 / limit)
}

// drain reserves n slots in a row, all asked for at now (a backlog), and
// returns their offsets from start.
func drain(l *limiter.Limiter, now time.Time, n int) []time.Duration {
	slots := make([]time.Duration, n)
	for i := range slots {
		slots[i] = l.Reserve(now).Sub(start)
	}
	return slots
}

// maxInWindow returns the most slots in any closed window [s, s+w] of the
// sorted slots.
func maxInWindow(slots []time.Duration, w time.Duration) int {
	most, lo := 0, 0
	for hi := range slots {
		for slots[hi]-slots[lo] > w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := limiter.Config{Mode: limiter.Token, Limit: 10, Burst: 5, Warmup: time.Second}
	tests := []struct {
		name string
		give func(c *limiter.Config)
		want []string
	}{
		{"zero limit", func(c *limiter.Config) { c.Limit = 0 }, []string{"limit must be a finite number > 0, got 0"}},
		{"negative limit", func(c *limiter.Config) { c.Limit = -1.5 }, []string{"got -1.5"}},
		{"NaN limit", func(c *limiter.Config) { c.Limit = math.NaN() }, []string{"got NaN"}},
		{"infinite limit", func(c *limiter.Config) { c.Limit = math.Inf(1) }, []string{"got +Inf"}},
		{"negative infinite limit", func(c *limiter.Config) { c.Limit = math.Inf(-1) }, []string{"got -Inf"}},
		{"zero burst", func(c *limiter.Config) { c.Burst = 0 }, []string{"burst must be >= 1, got 0"}},
		{"negative burst in leaky mode", func(c *limiter.Config) { c.Mode, c.Burst = limiter.Leaky, -3 }, []string{"burst must be >= 1, got -3"}},
		{"empty mode", func(c *limiter.Config) { c.Mode = "" }, []string{`unknown mode "" (want "leaky" or "token")`}},
		{"mode is case-sensitive", func(c *limiter.Config) { c.Mode = "Leaky" }, []string{`unknown mode "Leaky"`}},
		{"negative warmup", func(c *limiter.Config) { c.Warmup = -time.Second }, []string{"warmup must be >= 0, got -1s"}},
		{
			"every problem at once",
			func(c *limiter.Config) {
				*c = limiter.Config{Mode: "fifo", Limit: -2, Burst: 0, Warmup: -time.Millisecond}
			},
			[]string{`unknown mode "fifo"`, "got -2", "burst must be >= 1, got 0", "warmup must be >= 0, got -1ms"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.give(&cfg)
			l, err := limiter.New(cfg, start)
			if err == nil {
				t.Fatalf("New(%+v) = nil error; want %q", cfg, tt.want)
			}
			if l != nil {
				t.Errorf("New(%+v) returned a limiter with error %v; want nil", cfg, err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New(%+v) = %q; want it to contain %q", cfg, err, want)
				}
			}
			if msg := err.Error(); strings.ToLower(msg[:1]) != msg[:1] {
				t.Errorf("New(%+v) = %q; want a lowercase error", cfg, msg)
			}
		})
	}
}

func TestNewAcceptsGoodConfig(t *testing.T) {
	tests := []limiter.Config{
		{Mode: limiter.Leaky, Limit: 50, Burst: 1},
		{Mode: limiter.Leaky, Limit: 0.5, Burst: 100}, // burst ignored, not an error
		{Mode: limiter.Token, Limit: 20000, Burst: 20000},
		{Mode: limiter.Token, Limit: 3, Burst: 1, Warmup: time.Minute},
		{Mode: limiter.Token, Limit: 1e-12, Burst: math.MaxInt},
		{Mode: limiter.Leaky, Limit: math.MaxFloat64, Burst: 1},
	}
	for _, cfg := range tests {
		if _, err := limiter.New(cfg, start); err != nil {
			t.Errorf("New(%+v) = %v; want no error", cfg, err)
		}
	}
}

func TestValidateRateAcceptsOnlyWhatSetRateApplies(t *testing.T) {
	tests := []struct {
		limit float64
		burst int
		want  string // "" for no error
	}{
		{limit: 80, burst: 1},
		{limit: 0.5, burst: 10},
		{limit: 0, burst: 1, want: "limit must be a finite number > 0, got 0"},
		{limit: -1, burst: 1, want: "got -1"},
		{limit: math.NaN(), burst: 1, want: "got NaN"},
		{limit: math.Inf(1), burst: 1, want: "got +Inf"},
		{limit: 80, burst: 0, want: "burst must be >= 1, got 0"},
		{limit: 80, burst: -2, want: "burst must be >= 1, got -2"},
	}
	for _, tt := range tests {
		err := limiter.ValidateRate(tt.limit, tt.burst)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateRate(%v, %d) = %v; want nil", tt.limit, tt.burst, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ValidateRate(%v, %d) = %v; want an error containing %q", tt.limit, tt.burst, err, tt.want)
		}
	}
}

func TestLeakySlotsAreExactlyOneIntervalApart(t *testing.T) {
	tests := []struct {
		limit float64
		want  time.Duration
	}{
		{limit: 0.5, want: 2 * time.Second},
		{limit: 1, want: time.Second},
		{limit: 4, want: 250 * time.Millisecond},
		{limit: 50, want: 20 * time.Millisecond},
		{limit: 20000, want: 50 * time.Microsecond},
	}
	for _, tt := range tests {
		// A backlog asks for every slot at start; a caller that waits for
		// its slot asks at the previous slot's time. Both get the same slots.
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: tt.limit, Burst: 1})
		waiting := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: tt.limit, Burst: 1})
		now := start
		for k := range 1000 {
			want := time.Duration(k) * tt.want
			if got := l.Reserve(start).Sub(start); got != want {
				t.Fatalf("limit %v: Reserve(start) #%d = start+%v; want start+%v", tt.limit, k, got, want)
			}
			slot := waiting.Reserve(now)
			if got := slot.Sub(start); got != want {
				t.Fatalf("limit %v: Reserve(start+%v) #%d = start+%v; want start+%v", tt.limit, now.Sub(start), k, got, want)
			}
			now = slot
		}
	}
}

func TestLeakyNeverBurstsAfterIdle(t *testing.T) {
	for _, idle := range []time.Duration{0, time.Second, time.Hour, 24 * 365 * time.Hour} {
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 10, Burst: 1})
		drain(l, start, 5)
		now := at(400*time.Millisecond + idle)
		first, second := l.Reserve(now), l.Reserve(now)
		if first.Before(now) {
			t.Errorf("after idle %v: Reserve(now) = now-%v; want no earlier than now", idle, now.Sub(first))
		}
		if got, want := second.Sub(first), 100*time.Millisecond; got != want {
			t.Errorf("after idle %v: two Reserve(now) are %v apart; want %v", idle, got, want)
		}
	}
}

func TestLeakyNoHundredMillisecondWindowHoldsMoreThanATenthOfLimitPlusOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []float64{0.5, 3, 10, 50, 333, 1000, 20000} {
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1})
		// A backlog of callers arriving faster than the limit, with idle
		// gaps now and then, drained by reserving one slot after another.
		var slots []time.Duration
		now := time.Duration(0)
		mean := float64(interval(limit)) / 2
		for range 20000 {
			now += time.Duration(rng.ExpFloat64() * mean)
			if rng.IntN(100) == 0 {
				now += time.Duration(rng.IntN(50)) * interval(limit)
			}
			slots = append(slots, l.Reserve(at(now)).Sub(start))
		}
		if !slices.IsSorted(slots) {
			t.Fatalf("limit %v: slots are not in order", limit)
		}
		want := int(limit/10) + 1
		if got := maxInWindow(slots, 100*time.Millisecond); got > want {
			t.Errorf("limit %v: most slots in a 100ms window = %d; want <= %d", limit, got, want)
		}
	}
}

// The pipeline takes slots with Next and Allow: it asks Next, sleeps until
// the slot and takes it with Allow when it wakes, which may be late (a
// timer, a thread not run in time, a stall) or after idle time. However
// late it wakes, no 100ms window holds more than limit/10 + 1 slots and no
// second more than limit + 1, so an API that counts per 100ms or per second
// never sees the catch-up that keeps the rate.
func TestLeakyNoHundredMillisecondWindowHoldsMoreThanATenthOfLimitPlusOneWhateverTheWakeUps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, limit := range []float64{3, 10, 50, 333, 1000, 5000, 20000} {
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1})
		T := interval(limit)
		upTo := func(d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d) + 1)) }
		var now time.Duration
		var sent []time.Duration
		for range 20000 {
			now = max(now, l.Next(at(now)).Sub(start))
			switch r := rng.IntN(100); {
			case r < 80: // a timer's wake-up
				now += upTo(T / 2)
			case r < 98: // a late thread
				now += upTo(2 * T)
			default: // a stall
				now += upTo(5 * time.Millisecond)
			}
			if !l.Allow(at(now)) {
				t.Fatalf("limit %v: Allow(start+%v) right after the slot Next told = false", limit, now)
			}
			sent = append(sent, now)
			if rng.IntN(200) == 0 { // idle time
				now += upTo(50 * T)
			}
		}
		want := int(limit/10) + 1
		if got := maxInWindow(sent, 100*time.Millisecond); got > want {
			t.Errorf("limit %v: most slots in a 100ms window = %d; want <= %d", limit, got, want)
		}
		// A second is kept up to 16 383/s (maxWindowSlots).
		if got, want := maxInWindow(sent, time.Second), int(limit)+1; limit < 16384 && got > want {
			t.Errorf("limit %v: most slots in a second = %d; want <= %d", limit, got, want)
		}
	}
}

// A caller that wakes late for every slot, by as much as the schedule
// forgives, keeps the rate: the window check holds slots back without
// slowing the schedule, and the schedule, not the window (which would let
// limit + 10/s go), sets the rate.
func TestLeakyWakeUpsLateForEverySlotKeepTheRateAndNoMore(t *testing.T) {
	for _, limit := range []float64{1000, 5000} {
		T := interval(limit)
		for _, wake := range []time.Duration{T / 2, T, 14 * T / 10} {
			l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1})
			var now time.Duration
			var sent []time.Duration
			for range 20 * int(limit) {
				if next := l.Next(at(now)).Sub(start); next > now {
					now = next + wake
				}
				if !l.Allow(at(now)) {
					t.Fatalf("limit %v, wake-ups %v late: Allow(start+%v) = false", limit, wake, now)
				}
				sent = append(sent, now)
			}
			rate := float64(len(sent)-1) / (sent[len(sent)-1] - sent[0]).Seconds()
			// Up to an interval late, nothing is lost. Later than that,
			// each wake-up's slot and the next go together, and a window
			// holding 101 such pairs would hold 102: the window holds
			// some back, and the rate sheds that (0.4% at 1.4 intervals).
			least := limit * 0.9999
			if wake > T {
				least = limit * 0.99
			}
			if rate < least {
				t.Errorf("limit %v, wake-ups %v late: rate %.3f/s; want at least %.3f/s", limit, wake, rate, least)
			}
			if got, want := maxInWindow(sent, time.Second), int(limit)+1; got > want {
				t.Errorf("limit %v, wake-ups %v late: most slots in a second = %d; want <= %d", limit, wake, got, want)
			}
			if got, want := maxInWindow(sent, 100*time.Millisecond), int(limit/10)+1; got > want {
				t.Errorf("limit %v, wake-ups %v late: most slots in 100ms = %d; want <= %d", limit, wake, got, want)
			}
		}
	}
}

// A caller that comes after idle time has no schedule to keep, however
// slow the rate, and neither has one that stalled for longer than a
// wake-up can be late (2ms): at 1/s a message that comes 0.9s after the
// slot it could have had goes at once, and the next one a whole interval
// later, not 0.1s later. Only a wake-up's lateness is caught up.
func TestLeakyAllowAfterIdleTimeOrALongStallGivesNoBurst(t *testing.T) {
	for _, limit := range []float64{1, 10, 100, 400} {
		for _, waited := range []bool{false, true} {
			l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1})
			T := interval(limit)
			l.Reserve(start)
			if waited {
				l.Next(start) // told to wait until T; woken 0.9 T after it
			}
			now := at(T + 9*T/10)
			if !l.Allow(now) {
				t.Fatalf("limit %v, waited %v: Allow(start+%v) = false; want the slot", limit, waited, now.Sub(start))
			}
			if got, want := l.Next(now).Sub(now), T-2*time.Millisecond; got < want {
				t.Errorf("limit %v, waited %v: the next slot comes %v after the one taken at start+%v; want at least %v", limit, waited, got, now.Sub(start), want)
			}
		}
	}
}

func TestLeakyDoesNotDriftAtRatesWithoutWholeNanosecondIntervals(t *testing.T) {
	tests := []struct {
		limit float64
		num   int64 // the exact interval is num/den nanoseconds
		den   int64
		n     int
	}{
		{limit: 3, num: 1e9, den: 3, n: 30000},
		{limit: 7, num: 1e9, den: 7, n: 30000},
		{limit: 0.3, num: 1e10, den: 3, n: 30000},
		{limit: 30000, num: 1e5, den: 3, n: 300000},
	}
	for _, tt := range tests {
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: tt.limit, Burst: 1})
		var last time.Duration
		for k := range int64(tt.n) {
			// The exact slot k·num/den, rounded up: a slot never goes early.
			want := time.Duration((k*tt.num + tt.den - 1) / tt.den)
			got := l.Reserve(start).Sub(start)
			if d := got - want; d < -1 || d > 1 {
				t.Fatalf("limit %v: Reserve(start) #%d = start+%v; want start+%v ±1ns", tt.limit, k, got, want)
			}
			last = got - want
		}
		if last.Abs() >= time.Microsecond {
			t.Errorf("limit %v: drift after %d slots = %v; want < 1µs", tt.limit, tt.n, last)
		}
	}
}

func TestFractionalRateSpacesSlotsTwoSecondsApart(t *testing.T) {
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: 0.5, Burst: 1})
		for k, got := range drain(l, start, 10) {
			if want := time.Duration(k) * 2 * time.Second; got != want {
				t.Errorf("%s 0.5/s: Reserve(start) #%d = start+%v; want start+%v", mode, k, got, want)
			}
		}
		if got, want := l.Reserve(at(time.Hour)), at(time.Hour); !got.Equal(want) {
			t.Errorf("%s 0.5/s after idle: Reserve(start+1h) = start+%v; want start+1h", mode, got.Sub(start))
		}
	}
}

func TestHighRateGives20000SlotsFiftyMicrosecondsApartInOneSecond(t *testing.T) {
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: 20000, Burst: 1})
		count := 0
		prev := time.Duration(-1)
		for {
			got := l.Reserve(start).Sub(start)
			if got >= time.Second {
				break
			}
			if prev >= 0 && got-prev != 50*time.Microsecond {
				t.Fatalf("%s 20000/s: Reserve(start) #%d = start+%v; want start+%v", mode, count, got, prev+50*time.Microsecond)
			}
			prev = got
			count++
		}
		if count < 19999 || count > 20001 {
			t.Errorf("%s 20000/s: %d slots in the first second; want 20000 ±1", mode, count)
		}
	}
}

func TestTokenBurstsAtOnceAfterIdleThenHoldsTheLimit(t *testing.T) {
	const limit, burst = 100, 20
	l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: limit, Burst: burst})
	slots := drain(l, start, burst+5)
	for k, got := range slots {
		want := time.Duration(0)
		if k >= burst {
			want = time.Duration(k-burst+1) * 10 * time.Millisecond
		}
		if got != want {
			t.Errorf("Reserve(start) #%d = start+%v; want start+%v", k, got, want)
		}
	}

	// A long run of callers arriving 1.5 times faster than the limit.
	rng := rand.New(rand.NewPCG(3, 4))
	const run = 1000 * time.Second
	now, count := time.Duration(0), len(slots)
	for now < run {
		now += time.Duration(rng.ExpFloat64() * float64(interval(limit)) / 1.5)
		if l.Reserve(at(now)).Sub(start) <= run {
			count++
		}
	}
	got := float64(count) / run.Seconds()
	if math.Abs(got-limit)/limit > 0.001 {
		t.Errorf("average over %v = %.3f/s; want %v/s ±0.1%%", run, got, float64(limit))
	}
}

func TestTokenBurstRefillsAtTheLimitDuringIdleTime(t *testing.T) {
	const burst = 8
	T := 10 * time.Millisecond // limit 100/s
	tests := []struct {
		idle int // intervals since the last slot
		want int // slots at once
	}{
		{idle: 1, want: 1},
		{idle: 3, want: 3},
		{idle: burst - 1, want: burst - 1},
		{idle: burst, want: burst},
		{idle: 2 * burst, want: burst},
		{idle: 100000, want: burst},
	}
	for _, tt := range tests {
		l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: 100, Burst: burst})
		slots := drain(l, start, 3*burst) // empty the bucket
		now := at(slots[len(slots)-1] + time.Duration(tt.idle)*T)
		got := 0
		for l.Reserve(now).Equal(now) {
			got++
		}
		if got != tt.want {
			t.Errorf("after %d intervals idle: %d slots at once; want %d", tt.idle, got, tt.want)
		}
	}
}

func TestTokenNeverExceedsBurstPlusLimitInAnyWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tt := range []struct {
		limit float64
		burst int
	}{{3, 5}, {50, 10}, {1000, 100}, {0.5, 2}} {
		l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: tt.limit, Burst: tt.burst})
		var slots []time.Duration
		now := time.Duration(0)
		for range 20000 {
			now += time.Duration(rng.ExpFloat64() * float64(interval(tt.limit)) / 2)
			if rng.IntN(200) == 0 { // idle long enough to refill
				now += time.Duration(tt.burst+rng.IntN(10)) * interval(tt.limit)
			}
			slots = append(slots, l.Reserve(at(now)).Sub(start))
		}
		slices.Sort(slots)
		for _, w := range []time.Duration{0, 100 * time.Millisecond, time.Second, 10 * time.Second} {
			want := tt.burst + int(w.Seconds()*tt.limit)
			if got := maxInWindow(slots, w); got > want {
				t.Errorf("limit %v burst %d: most slots in a %v window = %d; want <= %d", tt.limit, tt.burst, w, got, want)
			}
		}
	}
}

func TestSetRateNextSlotUsesTheNewInterval(t *testing.T) {
	type step struct {
		setLimit float64 // 0: no SetRate before this Reserve
		setBurst int
		want     time.Duration // slot of Reserve(start)
	}
	tests := []struct {
		name  string
		cfg   limiter.Config
		steps []step
	}{
		{
			name: "leaky raise then lower",
			cfg:  limiter.Config{Mode: limiter.Leaky, Limit: 10, Burst: 1},
			steps: []step{
				{want: 0},
				{want: 100 * time.Millisecond},
				{setLimit: 20, setBurst: 1, want: 150 * time.Millisecond},
				{want: 200 * time.Millisecond},
				{setLimit: 5, setBurst: 1, want: 400 * time.Millisecond},
				{want: 600 * time.Millisecond},
				{setLimit: 0.5, setBurst: 1, want: 2600 * time.Millisecond},
			},
		},
		{
			name: "leaky ignores burst",
			cfg:  limiter.Config{Mode: limiter.Leaky, Limit: 10, Burst: 1},
			steps: []step{
				{want: 0},
				{setLimit: 10, setBurst: 50, want: 100 * time.Millisecond},
				{want: 200 * time.Millisecond},
			},
		},
		{
			// 5 at once, then 100ms apart. Slots still owed keep their
			// number: lowering releases no burst, raising makes no one wait.
			name: "token lower then raise",
			cfg:  limiter.Config{Mode: limiter.Token, Limit: 10, Burst: 5},
			steps: []step{
				{want: 0}, {want: 0}, {want: 0}, {want: 0}, {want: 0},
				{want: 100 * time.Millisecond},
				{setLimit: 1, setBurst: 5, want: 1100 * time.Millisecond},
				{want: 2100 * time.Millisecond},
				{setLimit: 100, setBurst: 5, want: 2110 * time.Millisecond},
				{want: 2120 * time.Millisecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(t, tt.cfg)
			last := start
			for k, s := range tt.steps {
				if s.setLimit != 0 {
					l.SetRateAt(last, s.setLimit, s.setBurst) // the caller is at the last slot's time
					if got := l.Limit(start); got != s.setLimit {
						t.Errorf("after SetRate(%v, %d): Limit(start) = %v; want %v", s.setLimit, s.setBurst, got, s.setLimit)
					}
				}
				last = l.Reserve(start)
				if got := last.Sub(start); got != s.want {
					t.Errorf("Reserve(start) #%d = start+%v; want start+%v", k, got, s.want)
				}
			}
		})
	}
}

// A rate change takes effect from now: slots reserved far ahead under a
// very low rate (a jammed caller) do not hold back the schedule once the
// rate is raised again.
func TestSetRateAtTakesEffectFromNowWhateverWasReservedBefore(t *testing.T) {
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: 200, Burst: 1})
		now := at(time.Minute)
		drain(l, now, 1)
		l.SetRateAt(now, 0.01, 1)
		for range 5 { // five slots taken and never used, 100s apart
			l.Reserve(now)
		}
		now = now.Add(2 * time.Second)
		l.SetRateAt(now, 200, 1)
		if got, want := l.Reserve(now).Sub(now), 5*time.Millisecond; got > want {
			t.Errorf("%s: 2s after lowering to 0.01/s and raising back to 200/s, the next slot is now+%v; want <= now+%v", mode, got, want)
		}
	}
}

func TestNextTellsTheNextSlotWithoutTakingIt(t *testing.T) {
	for _, cfg := range everyKind(10) {
		l := newLimiter(t, cfg)
		for k := range 10 {
			now := at(time.Duration(k) * 30 * time.Millisecond)
			next := l.Next(now)
			if again := l.Next(now); !again.Equal(next) {
				t.Fatalf("%+v: Next(now) twice = %v then %v; want the same slot", cfg, next.Sub(start), again.Sub(start))
			}
			if got := l.Reserve(now); !got.Equal(next) {
				t.Fatalf("%+v: Reserve(start+%v) #%d = start+%v; want start+%v as Next said", cfg, now.Sub(start), k, got.Sub(start), next.Sub(start))
			}
		}
	}
}

// Allow takes the slot only once it has come, and a rate lowered between
// Next and Allow makes Allow refuse, having taken nothing: the caller asks
// Next again and gets the new schedule.
func TestAllowTakesTheSlotOnlyOnceItHasCome(t *testing.T) {
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: 10, Burst: 1})
		if !l.Allow(start) {
			t.Fatalf("%s: Allow(start) = false; want the first slot", mode)
		}
		next := l.Next(start)
		if got, want := next.Sub(start), 100*time.Millisecond; got != want {
			t.Fatalf("%s: Next(start) = start+%v; want start+%v", mode, got, want)
		}
		if l.Allow(next.Add(-time.Nanosecond)) {
			t.Errorf("%s: Allow 1ns before the slot = true; want false", mode)
		}
		if got := l.Next(start); !got.Equal(next) {
			t.Errorf("%s: Next after a refused Allow = start+%v; want start+%v: nothing taken", mode, got.Sub(start), next.Sub(start))
		}
		l.SetRateAt(start, 0.5, 1) // lowered while the caller sleeps until next
		if l.Allow(next) {
			t.Errorf("%s: Allow(start+100ms) after lowering to 0.5/s = true; want false", mode)
		}
		if got, want := l.Next(next).Sub(start), 2*time.Second; got != want {
			t.Errorf("%s: Next after the change = start+%v; want start+%v, the new schedule untouched by the refused Allow", mode, got, want)
		}
	}
}

// A Leaky caller that waited for its slot and woke up to 2ms late takes
// it as if on time, so the rate does not lose its lateness, and the slots
// due meanwhile go at once; later than that, it keeps the schedule as if
// late by exactly 2ms and loses only the rest. A caller that was not told
// to wait for the slot and comes more than an interval after the last
// departure (idle time) keeps it only up to an interval and a half late,
// and else restarts the schedule from now.
func TestAllowKeepsTheScheduleOfACallerAWakeUpLate(t *testing.T) {
	tests := []struct {
		late     time.Duration
		waited   bool          // Next told the caller to wait for the slot
		wantMore int           // slots due at once after the one at 1s, taken late
		wantNext time.Duration // the slot after those
	}{
		{0, true, 0, 1001 * time.Millisecond},
		{700 * time.Microsecond, true, 0, 1001 * time.Millisecond},
		{1500 * time.Microsecond, true, 1, 1002 * time.Millisecond},
		{1600 * time.Microsecond, true, 1, 1002 * time.Millisecond},
		{2500 * time.Microsecond, true, 2, 1003500 * time.Microsecond}, // 0.5ms shed: as if 2ms late
		{50 * time.Millisecond, true, 2, 1051 * time.Millisecond},      // 48ms shed
		{1500 * time.Microsecond, false, 1, 1002 * time.Millisecond},
		{1600 * time.Microsecond, false, 0, 1002600 * time.Microsecond},
		{50 * time.Millisecond, false, 0, 1051 * time.Millisecond},
	}
	for _, tt := range tests {
		l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 1000, Burst: 1})
		l.Reserve(at(time.Second - time.Millisecond))
		slot := at(time.Second)
		if tt.waited {
			if got := l.Next(at(time.Second - time.Millisecond)); !got.Equal(slot) {
				t.Fatalf("Next = start+%v; want start+1s", got.Sub(start))
			}
		}
		now := slot.Add(tt.late)
		if !l.Allow(now) {
			t.Fatalf("late by %v: Allow = false; want the slot", tt.late)
		}
		more := 0
		for l.Allow(now) {
			more++
		}
		if more != tt.wantMore {
			t.Errorf("late by %v, waited %v: %d more slots due at once; want %d", tt.late, tt.waited, more, tt.wantMore)
		}
		if got := l.Next(now).Sub(start); got != tt.wantNext {
			t.Errorf("late by %v, waited %v: the next slot is at start+%v; want start+%v", tt.late, tt.waited, got, tt.wantNext)
		}
	}
}

// takeStalling takes n slots of l the way the pipeline's scheduler does: it
// asks Next, sleeps until the slot when it is still to come, and takes it
// with Allow, woken stall late for every every-th slot. It returns when each
// went, after start.
func takeStalling(t *testing.T, l *limiter.Limiter, n, every int, stall time.Duration) []time.Duration {
	t.Helper()
	now := start
	sent := make([]time.Duration, 0, n)
	for k := range n {
		if slot := l.Next(now); slot.After(now) {
			now = slot
			if k%every == every-1 {
				now = slot.Add(stall)
			}
		}
		if !l.Allow(now) {
			t.Fatalf("slot %d: Allow(start+%v) = false", k, now.Sub(start))
		}
		sent = append(sent, now.Sub(start))
	}
	return sent
}

// A stalled caller catches up no more, however late, than one woken 2ms
// late (maxCatchUp), and the slots that it and the callers right after it
// owe go at once: at 5000/s, woken 3ms late for every 250th slot, each
// stall loses 1ms and sends 11 slots together (no 1ms holds more than 16),
// and no 100ms window holds more than 501, no second more than 5001.
func TestAStalledCallerCatchesUpAsIfTwoMillisecondsLateAndLosesTheRest(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 5000, Burst: 1})
	sent := takeStalling(t, l, 10000, 250, 3*time.Millisecond)
	if got := maxInWindow(sent, time.Millisecond-1); got > 16 {
		t.Errorf("%d slots in 1ms; want at most 16: the 11 of a stall and the next 5", got)
	}
	if got := maxInWindow(sent, 100*time.Millisecond); got > 501 {
		t.Errorf("%d slots in 100ms; want at most 501", got)
	}
	if got := maxInWindow(sent, time.Second); got > 5001 {
		t.Errorf("%d slots in a second; want at most 5001", got)
	}
	// Each of the first 39 stalls sheds 1ms; the last one, slot 9999's
	// own, is still its wake-up.
	if got, want := sent[len(sent)-1], 9999*200*time.Microsecond+39*time.Millisecond+3*time.Millisecond; got != want {
		t.Errorf("slot 9999 went at start+%v; want start+%v", got, want)
	}
}

// Stalls caught up in every 100ms could each stay within limit/10 + 1 and
// still add up to more than limit + 1 in a second: at 5000/s, woken 1.9ms
// late for every 499th slot, a second would hold 5010 (measured with the
// 100ms window alone). The second's own window keeps it to 5001.
func TestLeakyCatchUpsNeverAddUpToMoreThanLimitPlusOneInASecond(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 5000, Burst: 1})
	sent := takeStalling(t, l, 20000, 499, 1900*time.Microsecond)
	if got := maxInWindow(sent, time.Second); got > 5001 {
		t.Errorf("%d slots in a second; want at most 5001", got)
	}
	if got := maxInWindow(sent, 100*time.Millisecond); got > 501 {
		t.Errorf("%d slots in 100ms; want at most 501", got)
	}
}

func TestSetRateRaisingBurstLetsMoreGoAtOnce(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: 10, Burst: 2})
	now := at(time.Hour)
	drain(l, now, 2) // the whole bucket
	l.SetRateAt(now, 10, 5)
	got := 0
	for l.Reserve(now).Equal(now) {
		got++
	}
	if got != 3 {
		t.Errorf("after SetRate(10, 5) on an empty bucket of 2: %d more slots at once; want 3", got)
	}
}

func TestSetRateIgnoresInvalidValues(t *testing.T) {
	tests := []struct {
		limit float64
		burst int
	}{
		{0, 1}, {-5, 1}, {math.NaN(), 1}, {math.Inf(1), 1}, {math.Inf(-1), 1}, {10, 0}, {10, -1},
	}
	for _, tt := range tests {
		for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
			l := newLimiter(t, limiter.Config{Mode: mode, Limit: 60, Burst: 1, Warmup: 10 * time.Second})
			l.Reserve(start)
			l.SetRate(tt.limit, tt.burst)
			if got, want := l.Limit(at(5*time.Second)), 40.0; got != want {
				t.Errorf("%s: after SetRate(%v, %d): Limit(start+5s) = %v; want %v (warm-up still running)", mode, tt.limit, tt.burst, got, want)
			}
			if got, want := l.Reserve(start).Sub(start), 50*time.Millisecond; got != want {
				t.Errorf("%s: after SetRate(%v, %d): Reserve(start) = start+%v; want start+%v", mode, tt.limit, tt.burst, got, want)
			}
		}
	}
}

func TestSetRateEndsTheWarmup(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 90, Burst: 1, Warmup: 10 * time.Second})
	if got, want := l.Limit(start), 30.0; got != want {
		t.Fatalf("Limit(start) = %v; want %v", got, want)
	}
	first := l.Reserve(start)
	l.SetRateAt(first, 100, 1)
	for _, d := range []time.Duration{0, 5 * time.Second, time.Minute} {
		if got := l.Limit(at(d)); got != 100 {
			t.Errorf("after SetRate(100, 1): Limit(start+%v) = %v; want 100", d, got)
		}
	}
	if got, want := l.Reserve(start).Sub(first), 10*time.Millisecond; got != want {
		t.Errorf("after SetRate(100, 1): next slot is %v after the last; want %v", got, want)
	}
}

func TestWarmupRampsFromAThirdOfTheLimitToTheLimit(t *testing.T) {
	const limit = 90.0
	const warmup = 10 * time.Second
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: limit, Burst: 1, Warmup: warmup})

		limits := []struct {
			at   time.Duration
			want float64
		}{
			{-time.Second, 30}, {0, 30}, {warmup / 4, 45}, {warmup / 2, 60}, {warmup * 3 / 4, 75},
			{warmup, 90}, {2 * warmup, 90}, {1000 * time.Hour, 90},
		}
		for _, tt := range limits {
			if got := l.Limit(at(tt.at)); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("%s: Limit(start+%v) = %v; want %v", mode, tt.at, got, tt.want)
			}
		}

		// A backlog drained from the start: the observed spacing follows
		// the ramp, and the slots in the warm-up add up to its area.
		var slots []time.Duration
		for {
			s := l.Reserve(start).Sub(start)
			slots = append(slots, s)
			if s > 2*warmup {
				break
			}
		}
		spacing := []struct {
			at   time.Duration
			want float64 // slots per second observed there
		}{
			{0, limit / 3}, {warmup / 2, limit * 2 / 3}, {warmup, limit}, {warmup * 3 / 2, limit},
		}
		for _, tt := range spacing {
			i, _ := slices.BinarySearch(slots, tt.at)
			got := 1 / (slots[i+1] - slots[i]).Seconds()
			if math.Abs(got-tt.want)/tt.want > 0.01 {
				t.Errorf("%s: rate observed at start+%v = %.3f/s; want %.3f/s ±1%%", mode, slots[i], got, tt.want)
			}
		}
		inWarmup, _ := slices.BinarySearch(slots, warmup)
		if want := limit * 2 / 3 * warmup.Seconds(); math.Abs(float64(inWarmup)-want) > 2 {
			t.Errorf("%s: %d slots during the warm-up; want %.0f ±2", mode, inWarmup, want)
		}
	}
}

func TestWarmupShrinksTheTokenBurst(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: 100, Burst: 10, Warmup: time.Minute})
	got := 0
	for l.Reserve(start).Equal(start) {
		got++
	}
	if want := 4; got != want { // 1 + (10-1)/3 at a third of the rate
		t.Errorf("burst at start of warm-up = %d; want %d", got, want)
	}
	now := at(time.Hour)
	got = 0
	for l.Reserve(now).Equal(now) {
		got++
	}
	if want := 10; got != want {
		t.Errorf("burst after warm-up = %d; want %d", got, want)
	}
}

func TestLimitWithoutWarmupIsTheConfiguredLimit(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Token, Limit: 42.5, Burst: 3})
	for _, d := range []time.Duration{-time.Hour, 0, time.Hour} {
		if got := l.Limit(at(d)); got != 42.5 {
			t.Errorf("Limit(start+%v) = %v; want 42.5", d, got)
		}
	}
}

func TestReserveNeverGivesASlotBeforeNowOrStart(t *testing.T) {
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Token} {
		l := newLimiter(t, limiter.Config{Mode: mode, Limit: 10, Burst: 5})
		if got := l.Reserve(at(-time.Hour)); got.Before(start) {
			t.Errorf("%s: Reserve(start-1h) = start-%v; want no earlier than start", mode, start.Sub(got))
		}
		for _, d := range []time.Duration{time.Second, 3 * time.Second, 2 * time.Second} {
			if got := l.Reserve(at(d)); got.Before(at(d)) {
				t.Errorf("%s: Reserve(start+%v) = start+%v; want no earlier than now", mode, d, got.Sub(start))
			}
		}
	}
}

func TestLeakyReserveWithAnOlderNowKeepsTheSpacing(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 10, Burst: 1})
	if got, want := l.Reserve(at(10*time.Second)).Sub(start), 10*time.Second; got != want {
		t.Fatalf("Reserve(start+10s) = start+%v; want start+%v", got, want)
	}
	if got, want := l.Reserve(at(5*time.Second)).Sub(start), 10100*time.Millisecond; got != want {
		t.Errorf("Reserve(start+5s) = start+%v; want start+%v", got, want)
	}
}

func TestReserveKeepsTheMonotonicClockOfStart(t *testing.T) {
	now := time.Now() // carries a monotonic reading
	l, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 10, Burst: 1}, now)
	if err != nil {
		t.Fatal(err)
	}
	l.Reserve(now)
	got := l.Reserve(now)
	if s := got.String(); !strings.Contains(s, "m=+") {
		t.Errorf("Reserve(now) = %s; want a time with a monotonic reading", s)
	}
	if d := got.Sub(now); d != 100*time.Millisecond {
		t.Errorf("Reserve(now) = now+%v; want now+100ms", d)
	}
}

func TestExtremeRatesSaturateInsteadOfOverflowing(t *testing.T) {
	tests := []limiter.Config{
		{Mode: limiter.Leaky, Limit: 1e-300, Burst: 1},
		{Mode: limiter.Token, Limit: 1e-300, Burst: math.MaxInt},
		{Mode: limiter.Token, Limit: 1e-9, Burst: 1 << 40},
		{Mode: limiter.Leaky, Limit: math.MaxFloat64, Burst: 1},
		{Mode: limiter.Token, Limit: 1e12, Burst: math.MaxInt},
		{Mode: limiter.Leaky, Limit: 1e-300, Burst: 1, Warmup: math.MaxInt64},
	}
	for _, cfg := range tests {
		l := newLimiter(t, cfg)
		prev := l.Reserve(start)
		if !prev.Equal(start) {
			t.Errorf("%+v: first Reserve(start) = start+%v; want start", cfg, prev.Sub(start))
		}
		for k := 1; k < 5; k++ {
			got := l.Reserve(start)
			if got.Before(prev) {
				t.Errorf("%+v: Reserve(start) #%d = start+%v, before slot #%d at start+%v", cfg, k, got.Sub(start), k-1, prev.Sub(start))
			}
			prev = got
		}
		// A token bucket may hand out a slot before an earlier one once
		// SetRate raises the burst, but never one before now.
		for _, r := range []struct {
			limit float64
			burst int
		}{{1, 1}, {1e-300, math.MaxInt}, {math.MaxFloat64, 1}, {1e-300, 1}} {
			l.SetRate(r.limit, r.burst)
			if got := l.Reserve(start); got.Before(start) {
				t.Errorf("%+v: after SetRate(%v, %d): Reserve(start) = start-%v; want no earlier than start", cfg, r.limit, r.burst, start.Sub(got))
			}
		}
	}
}

func TestConcurrentReserveGivesDistinctEvenlySpacedSlots(t *testing.T) {
	const goroutines, each = 64, 200
	for _, tt := range []struct {
		mode  limiter.Mode
		burst int
	}{{limiter.Leaky, 1}, {limiter.Token, 10}} {
		l := newLimiter(t, limiter.Config{Mode: tt.mode, Limit: 1000, Burst: tt.burst})
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			slots []time.Duration
		)
		for range goroutines {
			wg.Go(func() {
				mine := make([]time.Duration, each)
				for i := range mine {
					mine[i] = l.Reserve(start).Sub(start)
					if i%16 == 0 {
						l.Limit(start) // readers race with writers too
					}
				}
				mu.Lock()
				slots = append(slots, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(slots)
		for k, got := range slots {
			want := time.Duration(max(k-tt.burst+1, 0)) * time.Millisecond
			if got != want {
				t.Fatalf("%s: sorted slot #%d of %d = start+%v; want start+%v", tt.mode, k, len(slots), got, want)
			}
		}
	}
}

func TestConcurrentSetRateKeepsSlotsInOrder(t *testing.T) {
	l := newLimiter(t, limiter.Config{Mode: limiter.Leaky, Limit: 1000, Burst: 1})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 1000 {
			// At a time after every slot: what was reserved keeps its order.
			l.SetRateAt(at(time.Hour), float64(500+i%1000), 1)
		}
	})
	var got []time.Time
	for range 5000 {
		got = append(got, l.Reserve(start))
	}
	wg.Wait()
	for k := 1; k < len(got); k++ {
		// The fastest rate set is 1499/s: no two slots closer than 1/1499s.
		if d := got[k].Sub(got[k-1]); d < interval(1499) {
			t.Fatalf("Reserve(start) #%d is %v after #%d; want >= %v", k, d, k-1, interval(1499))
		}
	}
}

func TestReserveNextAndAllowDoNotAllocate(t *testing.T) {
	for _, cfg := range everyKind(1000) {
		l := newLimiter(t, cfg)
		now := start
		if got := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			l.Reserve(now)
		}); got != 0 {
			t.Errorf("%+v: Reserve allocates %v times per call; want 0", cfg, got)
		}
		if got := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			l.Allow(l.Next(now))
		}); got != 0 {
			t.Errorf("%+v: Next and Allow allocate %v times per slot; want 0", cfg, got)
		}
	}
}

func TestLeakyCallerALittleLateKeepsTheScheduleAndTheRate(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit = 1000 // slots 1ms apart; up to 0.5ms late keeps the schedule
	// After each slot the caller asks for the next one at once, except every
	// tenth time, when it wakes late (a timer firing late): by wake, which
	// puts it past the next slot's time by wake - 1ms.
	tests := []struct {
		name     string
		wake     time.Duration
		wantLast time.Duration // when slot 999 falls
	}{
		{"never late", 0, 999 * time.Millisecond},
		{"late by 0.3ms keeps the schedule", 1300 * time.Microsecond, 999 * time.Millisecond},
		{"late by 0.7ms restarts it", 1700 * time.Microsecond, 999*time.Millisecond + 99*700*time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1}, start)
			if err != nil {
				t.Fatal(err)
			}
			var prev time.Time
			now := start
			for k := range 1000 {
				slot := l.Reserve(now)
				if k > 0 && slot.Sub(prev) < time.Millisecond/2 {
					t.Fatalf("slots %d and %d are %v apart; want at least half an interval", k-1, k, slot.Sub(prev))
				}
				prev, now = slot, slot
				if k%10 == 9 && tt.wake > 0 {
					now = slot.Add(tt.wake)
				}
			}
			if got := prev.Sub(start); got != tt.wantLast {
				t.Errorf("slot 999 at %v; want %v", got, tt.wantLast)
			}
		})
	}
}

// A first caller late for the first slot has no schedule to keep: the
// schedule starts at its now, and the second slot comes a whole interval
// after it (not at start + 2 intervals, which a caller 19ms late at 50/s
// would reach 1ms later).
func TestALateFirstSlotStartsTheScheduleAtItsCaller(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 50, Burst: 1}, start)
	if err != nil {
		t.Fatal(err)
	}
	first := start.Add(19 * time.Millisecond)
	if !l.Allow(first) {
		t.Fatal("Allow at start+19ms = false; want the first slot")
	}
	if got, want := l.Next(first), first.Add(20*time.Millisecond); !got.Equal(want) {
		t.Errorf("second slot at start+%v; want a whole interval after the first, start+%v", got.Sub(start), want.Sub(start))
	}
}
