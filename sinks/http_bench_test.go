package sinks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// BenchmarkHTTPAttempt is one attempt, request and answer, to a server on
// 127.0.0.1, one at a time, the way a paced pipeline makes them: through
// net/http's Transport (as for https://), through the sink's own client
// by Send (a worker), and by Start (the scheduler), whose answer comes to
// done from the connection's reader. Compare them within one run:
//
//	go test -run '^$' -bench HTTPAttempt -benchmem -count 6 ./sinks | benchstat -col /path -
func BenchmarkHTTPAttempt(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cfg := httpConfig(srv.URL + "/callback")
	cfg.Headers = map[string]string{"Authorization": "Bearer k-123"}
	cfg.Signing = &SigningConfig{Scheme: "standard", Secret: whsecSecret}
	m := &shaper.Message{ID: "psp.callbacks/3/1234", Payload: make([]byte, 200)}
	build := func(b *testing.B, transport bool) *HTTP {
		h, err := NewHTTP(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if transport {
			throughTransport(h, cfg)
		}
		return h
	}
	send := func(b *testing.B, h *HTTP) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.Send(ctx, m)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, path := range []string{"net-http", "own-send", "own-start"} {
		b.Run("path="+path, func(b *testing.B) {
			h := build(b, path == "net-http")
			defer h.Close(context.Background())
			send(b, h) // a connection to keep
			answer := make(chan error, 1)
			done := func(err error) { answer <- err }
			b.ReportAllocs()
			for b.Loop() {
				if path == "own-start" && h.Start(context.Background(), m, 2*time.Second, done) {
					if err := <-answer; err != nil {
						b.Fatal(err)
					}
					continue
				}
				send(b, h)
			}
		})
	}
}
