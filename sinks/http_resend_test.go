package sinks

import (
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shaper-dev/shaper/shaper"
)

// droppingServer is a sink on 127.0.0.1 that reads each request whole and
// then, one time in three (seeded), closes the kept-alive connection
// without an answer: what a sink that crashes or restarts after reading
// looks like to the client. It counts the requests it read.
type droppingServer struct {
	srv      *httptest.Server
	received atomic.Int64
	dropped  atomic.Int64
	mu       sync.Mutex
	rng      *rand.Rand
}

func newDroppingServer(t *testing.T, seed uint64) *droppingServer {
	t.Helper()
	d := &droppingServer{rng: rand.New(rand.NewPCG(seed, seed))}
	d.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			t.Errorf("server: read body: %v", err)
			return
		}
		d.received.Add(1)
		d.mu.Lock()
		drop := d.rng.IntN(3) == 0
		d.mu.Unlock()
		if !drop {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		d.dropped.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("server: hijack: %v", err)
			return
		}
		_ = conn.Close()
	}))
	d.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	d.srv.Start()
	t.Cleanup(d.srv.Close)
	return d
}

// TestHTTPSendNeverWritesARequestTwice: every request that reaches the
// sink took a rate slot. net/http resends a replayable request (a GET, or
// one with an Idempotency-Key, which the sink always sends) when the
// kept-alive connection it went out on closes before an answer; the sink
// refuses that resend, so requests received equal Send calls, and each
// Send that failed is one request the caller counts as a failed attempt.
func TestHTTPSendNeverWritesARequestTwice(t *testing.T) {
	const workers, perWorker = 4, 60
	tests := []struct {
		name    string
		method  string
		payload []byte
	}{
		{"POST with a body", http.MethodPost, []byte(`{"payment":42,"status":"settled"}`)},
		{"GET without a body", http.MethodGet, nil},
		{"POST with an empty body", http.MethodPost, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newDroppingServer(t, uint64(i+1))
			cfg := httpConfig(srv.srv.URL + "/notify")
			cfg.Method = tt.method
			cfg.MaxInFlight = workers
			h := newHTTP(t, cfg)

			var sends, failed atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for n := range perWorker {
						m := &shaper.Message{ID: "psp.callbacks/" + strconv.Itoa(w) + "/" + strconv.Itoa(n), Payload: tt.payload}
						sends.Add(1)
						code, err := sendCode(testCtx(t), h, m)
						switch {
						case err == nil && code == "ok":
						case err != nil && code == "error":
							failed.Add(1)
						default:
							t.Errorf("Send = %q, %v; want \"ok\", nil or \"error\" and an error", code, err)
						}
					}
				})
			}
			wg.Wait()

			t.Logf("%s: %d Sends, %d requests received, %d dropped by the server, %d Sends failed",
				tt.name, sends.Load(), srv.received.Load(), srv.dropped.Load(), failed.Load())
			if got, want := srv.received.Load(), sends.Load(); got != want {
				t.Errorf("server received %d requests for %d Sends; want one request per Send (%d written twice)", got, want, got-want)
			}
			if got, want := failed.Load(), srv.dropped.Load(); got != want {
				t.Errorf("%d Sends failed; want one per request the server dropped (%d)", got, want)
			}
			if srv.dropped.Load() == 0 {
				t.Errorf("the server dropped no connection: the test proved nothing")
			}
		})
	}
}
