package limiter_test

import (
	"fmt"
	"time"

	"github.com/shaper-dev/shaper/limiter"
)

// Example shows leaky spacing: a backlog of five requests asked for at the
// same time leaves 250ms apart at 4/s, and a request after an idle minute
// gets no burst: the one after it still waits a full interval.
func Example() {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 4, Burst: 1}, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 5 {
		fmt.Println(lim.Reserve(start).Sub(start))
	}
	later := start.Add(time.Minute)
	fmt.Println(lim.Reserve(later).Sub(start))
	fmt.Println(lim.Reserve(later).Sub(start))
	// Output:
	// 0s
	// 250ms
	// 500ms
	// 750ms
	// 1s
	// 1m0s
	// 1m0.25s
}

// Example_token shows a token bucket: after idle time up to burst requests go
// at once, and the rest follow at the limit.
func Example_token() {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lim, err := limiter.New(limiter.Config{Mode: limiter.Token, Limit: 10, Burst: 3}, start)
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 5 {
		fmt.Println(lim.Reserve(start).Sub(start))
	}
	// Output:
	// 0s
	// 0s
	// 0s
	// 100ms
	// 200ms
}
