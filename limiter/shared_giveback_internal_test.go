package limiter

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
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
					want, mode, "1000", 1, "keep:1000", fmt.Sprintf("%s:%d", tt.ids[i%len(tt.ids)], given)).Slice()
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
				// Every replica that called so far is counted; token
				// mode counts none.
				counted := min(i+1, len(tt.ids))
				if tt.token {
					counted = 0
				}
				if r.replicas != counted {
					t.Errorf("call %d: replicas = %d; want %d", i, r.replicas, counted)
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
