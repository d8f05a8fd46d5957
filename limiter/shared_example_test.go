package limiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/limiter"
)

// ExampleNewShared wires a limiter shared by every replica of a pipeline:
// together they send at most 50 requests a second, and a replica that
// cannot reach Redis sends at most 25 on its own. It needs a Redis server,
// so it is compiled but not run.
func ExampleNewShared() {
	client := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:6379",
		// Lets the limiter's timeout end a hung call, not only stop
		// waiting for it.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	lim, err := limiter.NewShared(client, limiter.SharedConfig{
		Key:           "shaper:psp-callbacks",
		Mode:          limiter.Leaky,
		Limit:         50,
		Burst:         1,
		FallbackLimit: 25,
		Timeout:       50 * time.Millisecond,
		Logger:        slog.Default(),
	}, time.Now())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close()

	// Waiting for a slot ends with the caller's context, here at Ctrl-C.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for range 3 {
		slot := lim.Reserve(time.Now())
		select {
		case <-time.After(time.Until(slot)):
		case <-ctx.Done():
			return
		}
		// send one request here
	}
	fmt.Println(lim.Limit(time.Now()), lim.Fallback())
}
