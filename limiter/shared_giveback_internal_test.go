package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// The script hands slots a replica gave back out again in the leases of
// any replica, one at a time and never closer together than
// 100ms/(replicas-1) on the schedule, so that any 100 ms holds at most
// limit/10 + replicas, and keeps at most what it hands out in a second,
// 10 × (replicas − 1); in token mode and in a fleet of one it hands out
// none. Each case calls the script directly, many leases within a few
// milliseconds of server time, so that only the schedule moves.
func TestTheScriptHandsGivenBackSlotsOutAgainSpacedByTheFleet(t *testing.T) {
	addr := redistest.Start(t).Addr
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	const limit, want = 1000.0, 10 // a lease spans 10 ms of the schedule
	tests := []struct {
		name    string
		ids     []string // the callers, in turn
		token   bool
		given   int64 // given back by the second call
		extras  int   // leases with a slot of credit, of 40
		minGap  float64
		credits int64 // left after the 40 leases
	}{
		{name: "two replicas: one a 100 ms", ids: []string{"a", "b"}, given: 9, extras: 4, minGap: 100_000, credits: 5},
		{name: "three replicas: one a 50 ms", ids: []string{"a", "b", "c"}, given: 9, extras: 7, minGap: 50_000, credits: 2},
		{name: "five replicas: all of them, one a 25 ms", ids: []string{"a", "b", "c", "d", "e"}, given: 9, extras: 9, minGap: 25_000, credits: 0},
		{name: "a fleet of one keeps none", ids: []string{"a"}, given: 9, extras: 0, credits: 0},
		{name: "token mode takes none", ids: []string{"a", "b"}, token: true, given: 9, extras: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "shaper:giveback:" + tt.name
			mode := "0"
			if tt.token {
				mode = "1"
			}
			var bases []float64
			for i := range 40 {
				var given int64
				if i == len(tt.ids) {
					given = tt.given // every replica has called once
				}
				vals, err := sharedScript.Run(context.Background(), client, []string{key},
					want, mode, "1000", 1, "0", fmt.Sprintf("%s:%d", tt.ids[i%len(tt.ids)], given)).Slice()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				r, err := parseReply(vals)
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if r.extra == 1 {
					bases = append(bases, r.base)
				}
			}
			if len(bases) != tt.extras {
				t.Errorf("%d leases held a slot given back; want %d", len(bases), tt.extras)
			}
			for i := 1; i < len(bases); i++ {
				if gap := bases[i] - bases[i-1]; gap <= tt.minGap {
					t.Errorf("slots given back handed out %.0f µs apart on the schedule; want more than %.0f", gap, tt.minGap)
				}
			}
			if tt.token {
				return
			}
			credit, err := client.HGet(context.Background(), key, "credit").Int64()
			if err != nil || credit != tt.credits {
				t.Errorf("credit left = %d (%v); want %d", credit, err, tt.credits)
			}
		})
	}
}

// A lease asked for less than 20 ms after the schedule's end finds the
// slots of that gap untaken: every replica was late to ask, and the slots
// count as given back. A longer gap is a fleet that wanted none, and
// counts as nothing.
func TestTheScriptCountsTheSlotsOfAShortGapAsGivenBack(t *testing.T) {
	addr := redistest.Start(t).Addr
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	ctx := context.Background()
	var key string
	call := func(id string) reply {
		t.Helper()
		vals, err := sharedScript.Run(ctx, client, []string{key}, 10, "0", "1000", 1, "0", id+":0").Slice()
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseReply(vals)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	read := func(field string) float64 {
		t.Helper()
		v, err := client.HGet(ctx, key, field).Float64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// gapCall waits on the server's clock until the schedule ended at
	// least gap ago, then asks for a lease as b, and returns the reply and
	// how long before the call's now the schedule ended, in microseconds.
	gapCall := func(gap float64) (reply, float64) {
		t.Helper()
		tat := read("tat")
		if _, ok := testwait.Every(time.Millisecond, 5*time.Second, func() bool {
			return float64(client.Time(ctx).Val().UnixMicro())-tat >= gap
		}); !ok {
			t.Fatal("the server's clock did not pass the schedule's end")
		}
		r := call("b")
		return r, r.now - tat
	}

	// A busy machine may wake the test more than 20 ms late: it tries
	// again on a new key.
	for try := range 20 {
		key = fmt.Sprintf("shaper:seam:%d", try)
		call("a")
		call("b") // two replicas, so that a slot of credit may be handed out
		r, gap := gapCall(5_000)
		if gap > 19_000 {
			continue
		}
		// Two replicas keep at most a second's worth: 10.
		if got, want := int64(read("credit"))+int64(r.extra), min(int64(gap/1000), 10); got != want {
			t.Errorf("credit after a %.1f ms gap = %d (and %d handed out); want %d", gap/1000, got-int64(r.extra), r.extra, want)
		}
		before := read("credit")
		r, gap = gapCall(30_000)
		if got := read("credit") + float64(r.extra); got != before {
			t.Errorf("credit after a %.1f ms gap = %v; want %v as before it: a gap over 20 ms is a fleet that wanted no slot", gap/1000, got, before)
		}
		return
	}
	t.Fatal("20 tries woke more than 19 ms after the schedule's end")
}
