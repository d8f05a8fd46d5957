package sinks

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
)

// BenchmarkHTTPAttempt is one attempt, request and answer, to a server on
// 127.0.0.1, one at a time, the way a paced pipeline makes them, over
// http:// and https:// (HTTP/1.1 both): through net/http's Transport (as
// with a proxy or url_from) and through the sink's own client. A
// ping-pong measures the round trip, not the CPU of a paced rate (the
// bench harness measures that: docs/tuning.md). Compare them within one run:
//
//	go test -run '^$' -bench HTTPAttempt -benchmem -count 6 ./sinks | benchstat -col /path -
func BenchmarkHTTPAttempt(b *testing.B) {
	m := &shaper.Message{ID: "psp.callbacks/3/1234", Payload: make([]byte, 200)}
	send := func(b *testing.B, h *HTTP) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.Send(ctx, m)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, scheme := range []string{"http", "https"} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
		}))
		cfg := httpConfig("")
		if scheme == "https" {
			srv.StartTLS() // HTTP/1.1 only: httptest offers h2 only when asked to
			cfg.TLS = trustServer(b, srv)
		} else {
			srv.Start()
		}
		cfg.URL = srv.URL + "/callback"
		cfg.Headers = map[string]string{"Authorization": "Bearer k-123"}
		cfg.Signing = &SigningConfig{Scheme: "standard", Secret: whsecSecret}
		for _, path := range []string{"net-http", "own"} {
			b.Run("scheme="+scheme+"/path="+path, func(b *testing.B) {
				h, err := NewHTTP(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if path == "net-http" {
					throughTransport(h, cfg)
				}
				defer h.Close(context.Background())
				send(b, h) // a connection to keep
				b.ReportAllocs()
				for b.Loop() {
					send(b, h)
				}
			})
		}
		srv.Close()
	}
}

// trustServer returns a TLS config that trusts srv's certificate, started
// with StartTLS.
func trustServer(t testing.TB, srv *httptest.Server) *tlsconf.Config {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tlsconf.Config{CAFile: ca}
}
