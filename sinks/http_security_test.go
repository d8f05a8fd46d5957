package sinks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
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
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/tlsconf"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/webhook"
)

const (
	testSecret = "0123456789abcdef-signing-secret"
	// whsecSecret is a Standard Webhooks secret: whsec_ and the base64 of
	// a 32-byte key.
	whsecSecret = "whsec_c2hhcGVyLXRlc3Qta2V5LTAxMjM0NTY3ODlhYmNkZWY="
)

// receiverMAC is what a receiver computes on its own, with nothing of this
// module, from the documented formats: for the standard scheme the base64
// HMAC-SHA256 of "<id>.<t>.<body>" under the base64-decoded whsec_ key; for
// the shaper scheme the hex HMAC-SHA256 of "<t>\n<id>\n<body>" under the
// secret's bytes.
func receiverMAC(t *testing.T, scheme, secret, id, ts string, body []byte) string {
	t.Helper()
	if scheme == "standard" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			t.Fatal(err)
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		return base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "\n" + id + "\n"))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// signedParts reads the id, timestamp and MAC a request carries in scheme.
func signedParts(scheme, sigHeader string, h http.Header) (id, ts, mac string, ok bool) {
	if scheme == "standard" {
		mac, ok = strings.CutPrefix(h.Get("webhook-signature"), "v1,")
		return h.Get("webhook-id"), h.Get("webhook-timestamp"), mac, ok
	}
	ts, mac, ok = strings.Cut(h.Get(sigHeader), ",v2=")
	ts, tsOK := strings.CutPrefix(ts, "t=")
	return h.Get("Idempotency-Key"), ts, mac, ok && tsOK
}

func TestHTTPSignatureMatchesWhatTheReceiverComputes(t *testing.T) {
	tests := []struct {
		scheme, secret, header string
		sigHeader              string // where the MAC arrives
	}{
		{"standard", whsecSecret, "", "Webhook-Signature"},
		{"shaper", testSecret, "X-Webhook-Signature", "X-Webhook-Signature"},
	}
	for _, tt := range tests {
		t.Run(tt.scheme, func(t *testing.T) {
			type seen struct {
				header http.Header
				body   []byte
				err    error // webhook.Verify's verdict on receipt
			}
			verifier, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(tt.scheme), Secret: tt.secret, Header: tt.header})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var got []seen
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, seen{r.Header.Clone(), body, verifier.Verify(r.Header, body, time.Minute, time.Now())})
				n := len(got)
				mu.Unlock()
				if n == 1 {
					w.WriteHeader(http.StatusServiceUnavailable) // the retry is signed anew
				}
			})
			cfg := httpConfig(srv.URL)
			cfg.Signing = &SigningConfig{Scheme: tt.scheme, Secret: tt.secret, Header: tt.header}
			cfg.ForwardHeaders = true
			h := newHTTP(t, cfg)
			clock := time.Now().Add(-10 * time.Second)
			h.cur.Load().now = func() time.Time { clock = clock.Add(5 * time.Second); return clock }

			// A producer must not choose the signature: forged headers are dropped.
			m := &shaper.Message{ID: "psp.callbacks/3/1234", Payload: []byte(`{"amount":42,"note":"café"}`),
				Header: map[string][]string{tt.sigHeader: {"t=1,v2=forged"}, "webhook-id": {"forged"}, "webhook-timestamp": {"1"}}}
			if code, err := sendCode(testCtx(t), h, m); code != "503" || err == nil {
				t.Fatalf("first Send = %q, %v; want \"503\" and a StatusError", code, err)
			}
			sendHTTP(t, h, m)

			if len(got) != 2 {
				t.Fatalf("receiver saw %d requests; want 2", len(got))
			}
			for i, g := range got {
				id, ts, mac, ok := signedParts(tt.scheme, tt.sigHeader, g.header)
				if !ok || len(g.header.Values(tt.sigHeader)) != 1 {
					t.Fatalf("attempt %d: headers %v; want one signature in the %s format", i+1, g.header, tt.scheme)
				}
				if id != m.ID || g.header.Get("Idempotency-Key") != m.ID {
					t.Errorf("attempt %d: signed id %q, Idempotency-Key %q; want both %q", i+1, id, g.header.Get("Idempotency-Key"), m.ID)
				}
				if want := receiverMAC(t, tt.scheme, tt.secret, id, ts, g.body); mac != want {
					t.Errorf("attempt %d: MAC = %s; the receiver computes %s", i+1, mac, want)
				}
				if want := strconv.FormatInt(clock.Add(time.Duration(i-1)*5*time.Second).Unix(), 10); ts != want {
					t.Errorf("attempt %d: timestamp = %s; want the attempt's own time %s", i+1, ts, want)
				}
				if g.err != nil {
					t.Errorf("attempt %d: webhook.Verify on receipt = %v; want nil", i+1, g.err)
				}
			}
			if got[0].header.Get(tt.sigHeader) == got[1].header.Get(tt.sigHeader) {
				t.Errorf("the retry carries the first attempt's signature %q; want a fresh one", got[0].header.Get(tt.sigHeader))
			}
		})
	}
}

// TestHTTPSignaturesCoverTheMessageID: two messages with the same body
// sent in the same second carry different signatures, and neither
// verifies under the other's id: a captured request replayed under a new
// Idempotency-Key fails verification.
func TestHTTPSignaturesCoverTheMessageID(t *testing.T) {
	tests := []struct{ scheme, secret string }{{"standard", whsecSecret}, {"shaper", testSecret}}
	for _, tt := range tests {
		t.Run(tt.scheme, func(t *testing.T) {
			sink := sinktest.Start(t, sinktest.OK)
			cfg := httpConfig(sink.URL)
			cfg.Signing = &SigningConfig{Scheme: tt.scheme, Secret: tt.secret}
			h := newHTTP(t, cfg)
			second := time.Unix(time.Now().Unix(), 0)
			h.cur.Load().now = func() time.Time { return second }

			body := []byte(`{"payment":42,"status":"settled"}`)
			sendHTTP(t, h, &shaper.Message{ID: "psp.callbacks/3/1234", Payload: body})
			sendHTTP(t, h, &shaper.Message{ID: "psp.callbacks/3/1235", Payload: body})
			reqs := sink.Requests()
			got := []http.Header{reqs[0].Header, reqs[1].Header}

			verifier, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(tt.scheme), Secret: tt.secret})
			if err != nil {
				t.Fatal(err)
			}
			sig := "Webhook-Signature"
			if tt.scheme == "shaper" {
				sig = "Shaper-Signature"
			}
			if got[0].Get(sig) == got[1].Get(sig) {
				t.Errorf("same body, same second, ids .../1234 and .../1235: both carry %s %q; want different signatures", sig, got[0].Get(sig))
			}
			// The first request, replayed with the second's id.
			replay := got[0].Clone()
			replay.Set("Webhook-Id", got[1].Get("Webhook-Id"))
			replay.Set("Idempotency-Key", got[1].Get("Idempotency-Key"))
			if err := verifier.Verify(replay, body, time.Minute, second); !errors.Is(err, webhook.ErrBadSignature) {
				t.Errorf("Verify of the first signature under the second id = %v; want ErrBadSignature", err)
			}
			for i, g := range got {
				if err := verifier.Verify(g, body, time.Minute, second); err != nil {
					t.Errorf("Verify of request %d as sent = %v; want nil", i+1, err)
				}
			}
		})
	}
}

func TestHTTPStandardSigningWithoutAnIDIsMalformedWithoutRequest(t *testing.T) {
	sink := sinktest.Start(t, sinktest.OK)
	cfg := httpConfig(sink.URL)
	cfg.Signing = &SigningConfig{Scheme: "standard", Secret: whsecSecret}
	h := newHTTP(t, cfg)
	code, err := sendCode(testCtx(t), h, &shaper.Message{Payload: []byte("{}")})
	if code != "" || !errors.Is(err, shaper.ErrMalformed) {
		t.Errorf("Send(no id) = %q, %v; want \"\" and ErrMalformed: webhook-id is required", code, err)
	}
	if n := sink.RequestCount(); n != 0 {
		t.Errorf("server saw %d requests; want 0", n)
	}
}

func TestNewHTTPRefusesSigningItCannotDoWithoutShowingTheSecret(t *testing.T) {
	const short = "short-secret" // 12 bytes
	tests := []struct {
		name    string
		signing SigningConfig
		headers map[string]string
		keyHdr  string
	}{
		{"short secret", SigningConfig{Secret: short}, nil, ""},
		{"empty secret", SigningConfig{}, nil, ""},
		{"whsec secret not base64", SigningConfig{Secret: "whsec_" + testSecret}, nil, ""},
		{"unknown scheme", SigningConfig{Scheme: "stripe", Secret: testSecret}, nil, ""},
		{"header with the standard scheme", SigningConfig{Secret: testSecret, Header: "X-Sig"}, nil, ""},
		{"standard header also configured", SigningConfig{Secret: testSecret}, map[string]string{"webhook-id": "x"}, ""},
		{"standard header is the key header", SigningConfig{Scheme: "standard", Secret: testSecret}, nil, "webhook-signature"},
		{"header is Idempotency-Key", SigningConfig{Scheme: "shaper", Secret: testSecret, Header: "idempotency-key"}, nil, ""},
		{"header is framing", SigningConfig{Scheme: "shaper", Secret: testSecret, Header: "Content-Length"}, nil, ""},
		{"header also configured", SigningConfig{Scheme: "shaper", Secret: testSecret, Header: "X-Sig"}, map[string]string{"x-sig": short}, ""},
		{"header is the key header", SigningConfig{Scheme: "shaper", Secret: testSecret, Header: "X-Key"}, nil, "x-key"},
		{"header name invalid", SigningConfig{Scheme: "shaper", Secret: testSecret, Header: "X Sig"}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig("https://example.com/hook")
			cfg.Signing, cfg.Headers, cfg.KeyHeader = &tt.signing, tt.headers, tt.keyHdr
			h, err := NewHTTP(cfg)
			if err == nil {
				h.Close(context.Background())
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
	schemes := []struct {
		scheme, secret, sigHeader string
	}{
		{"standard", whsecSecret, "Webhook-Signature"},
		{"shaper", testSecret, "Shaper-Signature"},
	}
	for _, sc := range schemes {
		t.Run(sc.scheme, func(t *testing.T) {
			var echo string // what the receiver answers, before and after its echo
			var mac string  // the signature of the last request, without prefix
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				_, _, mac, _ = signedParts(sc.scheme, sc.sigHeader, r.Header)
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, strings.NewReplacer(
					"SIGMAC", mac,
					"AUTH", r.Header.Get("Authorization"),
					"TOKEN", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
					"KEY", r.Header.Get("X-Api-Key"),
					"SIG", r.Header.Get(sc.sigHeader),
					"URL", r.URL.String(),
				).Replace(echo))
			})
			cfg := httpConfig(strings.Replace(srv.URL, "http://", "http://shaper:"+urlPW+"@", 1) + "/hooks/" + path + "?token=" + query)
			cfg.Headers = map[string]string{"Authorization": "Bearer " + bearer, "X-Api-Key": apiKey, "Content-Type": "application/json"}
			cfg.Signing = &SigningConfig{Scheme: sc.scheme, Secret: sc.secret}
			h := newHTTP(t, cfg)

			tests := []struct {
				name string
				echo string
				want string // in the excerpt
			}{
				{"every header echoed", "bad request: authorization=AUTH token=TOKEN key=KEY signature=SIG mac=SIGMAC url=URL content-type=application/json", "content-type=application/json"},
				{"a secret across the excerpt's end", strings.Repeat("a", 500) + "KEY tail", strings.Repeat("a", 500) + "[redacted]"},
				// Blanking the first two in place and cutting after would pull the
				// start of the third (at byte 525, past the read) into the excerpt.
				{"a shorter replacement does not pull a secret into the excerpt", "TOKENTOKEN" + strings.Repeat("b", 479) + "TOKEN", "[redacted][redacted]" + strings.Repeat("b", 512-46)},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					echo = tt.echo
					_, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("{}")})
					var se *shaper.StatusError
					if !errors.As(err, &se) {
						t.Fatalf("Send = %v; want a StatusError", err)
					}
					for _, secret := range []string{bearer, apiKey, urlPW, query, path, sc.secret, strings.TrimPrefix(sc.secret, "whsec_")} {
						for n := minRedacted; n <= len(secret); n++ {
							if strings.Contains(err.Error(), secret[:n]) {
								t.Fatalf("error %q shows %d bytes of the credential %q", err, n, secret)
							}
						}
					}
					if mac == "" || strings.Contains(err.Error(), mac) || strings.Contains(err.Error(), mac[:16]) {
						t.Errorf("error %q shows the request's signature %q", err, mac)
					}
					if !strings.Contains(se.Body, tt.want) || len(se.Body) > maxErrorBody+len(redacted) {
						t.Errorf("Body = %q (%d bytes); want it to hold %q and stay near %d bytes", se.Body, len(se.Body), tt.want, maxErrorBody)
					}
				})
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
		tls       *tlsconf.Config
		wantError string // "" for a 204
	}{
		{"ca_file trusts the server", plain, &tlsconf.Config{CAFile: pki.CAFile}, ""},
		{"system CAs do not", plain, nil, "certificate"},
		{"another CA does not", plain, &tlsconf.Config{CAFile: other.CAFile}, "unknown authority"},
		{"server_name is checked", plain, &tlsconf.Config{CAFile: pki.CAFile, ServerName: "sink.test"}, ""},
		{"a wrong server_name fails", plain, &tlsconf.Config{CAFile: pki.CAFile, ServerName: "other.test"}, "other.test"},
		{"client certificate passes mutual TLS", mutual, &tlsconf.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, ""},
		{"no client certificate fails mutual TLS", mutual, &tlsconf.Config{CAFile: pki.CAFile}, "certificate"},
		{"another CA's client certificate fails mutual TLS", mutual, &tlsconf.Config{CAFile: pki.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, "certificate"},
		{"min_version 1.2 takes a TLS 1.2 server", only12, &tlsconf.Config{CAFile: pki.CAFile, MinVersion: tlsconf.Version12}, ""},
		{"min_version 1.3 refuses a TLS 1.2 server", only12, &tlsconf.Config{CAFile: pki.CAFile, MinVersion: tlsconf.Version13}, "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig(tt.srv.URL + "/hook")
			cfg.TLS = tt.tls
			h := newHTTP(t, cfg)
			code, err := sendCode(testCtx(t), h, &shaper.Message{ID: "1", Payload: []byte("{}")})
			switch {
			case tt.wantError == "" && (code != "ok" || err != nil):
				t.Errorf("Send = %q, %v; want \"ok\", nil", code, err)
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
		tls  tlsconf.Config
		want string
	}{
		{"tls with http://", "http://example.com/hook", tlsconf.Config{}, "https"},
		{"missing ca_file", "https://example.com/hook", tlsconf.Config{CAFile: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"unknown min_version", "https://example.com/hook", tlsconf.Config{MinVersion: "1.1"}, "min_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := httpConfig(tt.url)
			cfg.TLS = &tt.tls
			h, err := NewHTTP(cfg)
			if err == nil {
				h.Close(context.Background())
				t.Fatalf("NewHTTP = nil error; want one mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewHTTP = %v; want it to mention %q", err, tt.want)
			}
		})
	}
}
