package sinks

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/kafkaconn/kafkaconntest"
	"github.com/shaper-dev/shaper/shaper"
)

const testSecret = "0123456789abcdef-signing-secret"

// receiverMAC is what a receiver computes on its own, with nothing of this
// package: the hex HMAC-SHA256 of "<t>.<body>".
func receiverMAC(secret, t string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestHTTPSignatureMatchesWhatTheReceiverComputes(t *testing.T) {
	type seen struct {
		header string
		body   []byte
		err    error // VerifySignature's verdict on receipt
	}
	var mu sync.Mutex
	var got []seen
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sig := r.Header.Get("X-Webhook-Signature")
		mu.Lock()
		got = append(got, seen{sig, body, VerifySignature(sig, body, testSecret, time.Minute, time.Now())})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the retry is signed anew
		}
	})
	cfg := httpConfig(srv.URL)
	cfg.Signing = &shaper.SigningConfig{Secret: testSecret, Header: "X-Webhook-Signature"}
	cfg.ForwardHeaders = true
	h := newHTTP(t, cfg)
	clock := time.Now().Add(-10 * time.Second)
	h.cur.Load().now = func() time.Time { clock = clock.Add(5 * time.Second); return clock }

	// A producer must not choose the signature: a forged header is dropped.
	m := &shaper.Message{ID: "s/1", Payload: []byte(`{"amount":42,"note":"café"}`),
		Header: map[string][]string{"X-Webhook-Signature": {"t=1,v1=forged"}}}
	if code, err := h.Send(testCtx(t), m); code != "503" || err == nil {
		t.Fatalf("first Send = %q, %v; want \"503\" and a StatusError", code, err)
	}
	sendHTTP(t, h, m)

	if len(got) != 2 {
		t.Fatalf("receiver saw %d requests; want 2", len(got))
	}
	for i, g := range got {
		ts, mac, ok := strings.Cut(g.header, ",v1=")
		ts = strings.TrimPrefix(ts, "t=")
		if !ok || !isDigits(ts) {
			t.Fatalf("attempt %d: signature header %q; want t=<unix seconds>,v1=<hex>", i+1, g.header)
		}
		if want := receiverMAC(testSecret, ts, g.body); mac != want {
			t.Errorf("attempt %d: v1 = %s; the receiver computes %s", i+1, mac, want)
		}
		if want := strconv.FormatInt(clock.Add(time.Duration(i-1)*5*time.Second).Unix(), 10); ts != want {
			t.Errorf("attempt %d: t = %s; want the attempt's own time %s", i+1, ts, want)
		}
		if g.err != nil {
			t.Errorf("attempt %d: VerifySignature on receipt = %v; want nil", i+1, g.err)
		}
	}
	if got[0].header == got[1].header {
		t.Errorf("the retry carries the first attempt's signature %q; want a fresh one", got[0].header)
	}
}

func TestVerifySignatureDetectsTamperingReplaysAndMalformedHeaders(t *testing.T) {
	body := []byte(`{"payment":42,"status":"settled"}`)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	valid := signature([]byte(testSecret), at, body)
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := receiverMAC(testSecret, ts, body)

	tests := []struct {
		name      string
		header    string
		body      []byte
		secret    string
		tolerance time.Duration
		now       time.Time
		want      error // nil, ErrBadSignature or ErrStaleSignature
	}{
		{"valid", valid, body, testSecret, time.Minute, at.Add(30 * time.Second), nil},
		{"valid at the edge of the tolerance", valid, body, testSecret, time.Minute, at.Add(time.Minute), nil},
		{"receiver clock a little behind", valid, body, testSecret, time.Minute, at.Add(-30 * time.Second), nil},
		{"default tolerance of 5 minutes", valid, body, testSecret, 0, at.Add(4 * time.Minute), nil},
		{"spaces and unknown entries are ignored", "t=" + ts + ", v0=abc, v1=" + mac + ", x=1", body, testSecret, time.Minute, at, nil},
		{"one of several v1 matches (rotation)", "t=" + ts + ",v1=" + strings.Repeat("0", 64) + ",v1=" + mac, body, testSecret, time.Minute, at, nil},

		{"tampered body", valid, []byte(`{"payment":43,"status":"settled"}`), testSecret, time.Minute, at, ErrBadSignature},
		{"body re-encoded", valid, []byte(`{"payment": 42, "status": "settled"}`), testSecret, time.Minute, at, ErrBadSignature},
		{"wrong secret", valid, body, testSecret + "x", time.Minute, at, ErrBadSignature},
		{"timestamp moved forward", "t=" + strconv.FormatInt(at.Unix()+600, 10) + ",v1=" + mac, body, testSecret, time.Minute, at.Add(10 * time.Minute), ErrBadSignature},
		{"stale: replayed after the tolerance", valid, body, testSecret, time.Minute, at.Add(time.Minute + time.Second), ErrStaleSignature},
		{"stale: default tolerance", valid, body, testSecret, 0, at.Add(6 * time.Minute), ErrStaleSignature},
		{"from the future", valid, body, testSecret, time.Minute, at.Add(-2 * time.Minute), ErrStaleSignature},

		{"empty header", "", body, testSecret, time.Minute, at, ErrBadSignature},
		{"no timestamp", "v1=" + mac, body, testSecret, time.Minute, at, ErrBadSignature},
		{"no v1", "t=" + ts, body, testSecret, time.Minute, at, ErrBadSignature},
		{"two timestamps", "t=" + ts + ",t=" + ts + ",v1=" + mac, body, testSecret, time.Minute, at, ErrBadSignature},
		{"negative timestamp", "t=-" + ts + ",v1=" + mac, body, testSecret, time.Minute, at, ErrBadSignature},
		{"huge timestamp", "t=99999999999999999999,v1=" + mac, body, testSecret, time.Minute, at, ErrBadSignature},
		{"v1 not hex", "t=" + ts + ",v1=" + strings.ToUpper(mac[:10]) + "zz" + mac[12:], body, testSecret, time.Minute, at, ErrBadSignature},
		{"v1 truncated", "t=" + ts + ",v1=" + mac[:32], body, testSecret, time.Minute, at, ErrBadSignature},
		{"entry without =", "t=" + ts + ",v1" + mac, body, testSecret, time.Minute, at, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifySignature(tt.header, tt.body, tt.secret, tt.tolerance, tt.now)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("VerifySignature(%q) = %v; want %v", tt.header, err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), tt.secret) {
				t.Errorf("VerifySignature error %q shows the secret", err)
			}
		})
	}
}

func TestNewHTTPRefusesSigningItCannotDoWithoutShowingTheSecret(t *testing.T) {
	const short = "short-secret" // 12 bytes
	tests := []struct {
		name    string
		signing shaper.SigningConfig
		headers map[string]string
		keyHdr  string
	}{
		{"short secret", shaper.SigningConfig{Secret: short}, nil, ""},
		{"empty secret", shaper.SigningConfig{}, nil, ""},
		{"header is Idempotency-Key", shaper.SigningConfig{Secret: testSecret, Header: "idempotency-key"}, nil, ""},
		{"header is framing", shaper.SigningConfig{Secret: testSecret, Header: "Content-Length"}, nil, ""},
		{"header also configured", shaper.SigningConfig{Secret: testSecret, Header: "X-Sig"}, map[string]string{"x-sig": short}, ""},
		{"header is the key header", shaper.SigningConfig{Secret: testSecret, Header: "X-Key"}, nil, "x-key"},
		{"header name invalid", shaper.SigningConfig{Secret: testSecret, Header: "X Sig"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig("https://example.com/hook")
			cfg.Signing, cfg.Headers, cfg.KeyHeader = &tt.signing, tt.headers, tt.keyHdr
			h, err := NewHTTP(cfg)
			if err == nil {
				h.Close()
				t.Fatalf("NewHTTP = nil error; want one")
			}
			if strings.Contains(err.Error(), short) || strings.Contains(err.Error(), testSecret) {
				t.Errorf("NewHTTP = %q; it must not show the secret", err)
			}
		})
	}
}

func TestHTTPStatusErrorBlanksOutEchoedCredentials(t *testing.T) {
	const (
		bearer = "psp-bearer-token-123456"
		apiKey = "api-key-value-abcdef"
		urlPW  = "url-password-987654"
		query  = "query-token-24680246"
		path   = "PathTokenABCDEFGHIJKLMNOP"
	)
	var echo string // what the receiver answers, before and after its echo
	var v1 string   // the signature of the last request
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, v1, _ = strings.Cut(r.Header.Get("Shaper-Signature"), "v1=")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, strings.NewReplacer(
			"SIGV1", v1,
			"AUTH", r.Header.Get("Authorization"),
			"TOKEN", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
			"KEY", r.Header.Get("X-Api-Key"),
			"SIG", r.Header.Get("Shaper-Signature"),
			"URL", r.URL.String(),
		).Replace(echo))
	})
	cfg := httpConfig(strings.Replace(srv.URL, "http://", "http://shaper:"+urlPW+"@", 1) + "/hooks/" + path + "?token=" + query)
	cfg.Headers = map[string]string{"Authorization": "Bearer " + bearer, "X-Api-Key": apiKey, "Content-Type": "application/json"}
	cfg.Signing = &shaper.SigningConfig{Secret: testSecret, Header: "Shaper-Signature"}
	h := newHTTP(t, cfg)

	tests := []struct {
		name string
		echo string
		want string // in the excerpt
	}{
		{"every header echoed", "bad request: authorization=AUTH token=TOKEN key=KEY signature=SIG v1=SIGV1 url=URL content-type=application/json", "content-type=application/json"},
		{"a secret across the excerpt's end", strings.Repeat("a", 500) + "KEY tail", strings.Repeat("a", 500) + "[redacted]"},
		// Blanking the first two in place and cutting after would pull the
		// start of the third (at byte 525, past the read) into the excerpt.
		{"a shorter replacement does not pull a secret into the excerpt", "TOKENTOKEN" + strings.Repeat("b", 479) + "TOKEN", "[redacted][redacted]" + strings.Repeat("b", 512-46)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo = tt.echo
			_, err := h.Send(testCtx(t), &shaper.Message{ID: "1", Payload: []byte("{}")})
			var se *shaper.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("Send = %v; want a StatusError", err)
			}
			for _, secret := range []string{bearer, apiKey, urlPW, query, path, testSecret} {
				for n := minRedacted; n <= len(secret); n++ {
					if strings.Contains(err.Error(), secret[:n]) {
						t.Fatalf("error %q shows %d bytes of the credential %q", err, n, secret)
					}
				}
			}
			if strings.Contains(err.Error(), "t=") || strings.Contains(err.Error(), v1) {
				t.Errorf("error %q shows the request's signature", err)
			}
			if !strings.Contains(se.Body, tt.want) || len(se.Body) > maxErrorBody+len(redacted) {
				t.Errorf("Body = %q (%d bytes); want it to hold %q and stay near %d bytes", se.Body, len(se.Body), tt.want, maxErrorBody)
			}
		})
	}
}

// tlsServer starts an HTTPS server on 127.0.0.1 with the PKI's server
// certificate, asking for a client certificate with mutual.
func tlsServer(t *testing.T, pki *kafkaconntest.PKI, mutual bool, maxVersion uint16) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mutual && len(r.TLS.PeerCertificates) == 0 {
			t.Errorf("mutual TLS request without a client certificate")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = pki.ServerConfig(mutual)
	srv.TLS.MaxVersion = maxVersion
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPTLSTrustsTheConfiguredCAAndPresentsTheClientCertificate(t *testing.T) {
	pki := kafkaconntest.NewPKI(t, "127.0.0.1", "sink.test")
	other := kafkaconntest.NewPKI(t, "127.0.0.1")
	plain := tlsServer(t, pki, false, 0)
	mutual := tlsServer(t, pki, true, 0)
	only12 := tlsServer(t, pki, false, tls.VersionTLS12)

	tests := []struct {
		name      string
		srv       *httptest.Server
		tls       *shaper.TLSConfig
		wantError string // "" for a 204
	}{
		{"ca_file trusts the server", plain, &shaper.TLSConfig{CAFile: pki.CAFile}, ""},
		{"system CAs do not", plain, nil, "certificate"},
		{"another CA does not", plain, &shaper.TLSConfig{CAFile: other.CAFile}, "unknown authority"},
		{"server_name is checked", plain, &shaper.TLSConfig{CAFile: pki.CAFile, ServerName: "sink.test"}, ""},
		{"a wrong server_name fails", plain, &shaper.TLSConfig{CAFile: pki.CAFile, ServerName: "other.test"}, "other.test"},
		{"client certificate passes mutual TLS", mutual, &shaper.TLSConfig{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, ""},
		{"no client certificate fails mutual TLS", mutual, &shaper.TLSConfig{CAFile: pki.CAFile}, "certificate"},
		{"another CA's client certificate fails mutual TLS", mutual, &shaper.TLSConfig{CAFile: pki.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, "certificate"},
		{"min_version 1.2 takes a TLS 1.2 server", only12, &shaper.TLSConfig{CAFile: pki.CAFile, MinVersion: shaper.TLSVersion12}, ""},
		{"min_version 1.3 refuses a TLS 1.2 server", only12, &shaper.TLSConfig{CAFile: pki.CAFile, MinVersion: shaper.TLSVersion13}, "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig(tt.srv.URL + "/hook")
			cfg.TLS = tt.tls
			h := newHTTP(t, cfg)
			code, err := h.Send(testCtx(t), &shaper.Message{ID: "1", Payload: []byte("{}")})
			switch {
			case tt.wantError == "" && (code != "204" || err != nil):
				t.Errorf("Send = %q, %v; want \"204\", nil", code, err)
			case tt.wantError != "" && (code != "error" || err == nil || !strings.Contains(err.Error(), tt.wantError)):
				t.Errorf("Send = %q, %v; want \"error\" mentioning %q", code, err, tt.wantError)
			}
		})
	}
}

func TestNewHTTPRefusesTLSForPlainHTTPAndUnreadableFiles(t *testing.T) {
	tests := []struct {
		name string
		url  string
		tls  shaper.TLSConfig
		want string
	}{
		{"tls with http://", "http://example.com/hook", shaper.TLSConfig{}, "https"},
		{"missing ca_file", "https://example.com/hook", shaper.TLSConfig{CAFile: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"unknown min_version", "https://example.com/hook", shaper.TLSConfig{MinVersion: "1.1"}, "min_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig(tt.url)
			cfg.TLS = &tt.tls
			h, err := NewHTTP(cfg)
			if err == nil {
				h.Close()
				t.Fatalf("NewHTTP = nil error; want one mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewHTTP = %v; want it to mention %q", err, tt.want)
			}
		})
	}
}
