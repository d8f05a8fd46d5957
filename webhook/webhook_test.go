package webhook

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// The Standard Webhooks libraries' published example (test_sign_function).
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTime   = 1614265330
	specBody   = `{"test": 2432232314}`
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

	rawSecret = "0123456789abcdef-raw-secret"
	payment   = `{"payment":42,"status":"settled"}`
)

func newSigner(t *testing.T, cfg Config) *Signer {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// TestSignMatchesTheStandardWebhooksVectors checks Sign against the
// published Standard Webhooks example and against values computed apart
// from this package (Python's hmac and base64 over the formats in the
// package documentation), so both schemes sign exactly the bytes documented.
func TestSignMatchesTheStandardWebhooksVectors(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		id     string
		at     int64
		body   string
		header string // the signature header's name
		want   string
	}{
		{"published example", Config{Secret: specSecret}, specID, specTime, specBody, SignatureHeader, specSig},
		{"published example, scheme named", Config{Scheme: Standard, Secret: specSecret}, specID, specTime, specBody, SignatureHeader, specSig},
		{"kafka id with dots", Config{Secret: specSecret}, "psp.callbacks/3/1234", 1767225600, payment, SignatureHeader, "v1,3gscjzCAfpd2N/5uGjUk8v79AUY/jhMM5bHzIFihFD4="},
		{"next offset, same body and second", Config{Secret: specSecret}, "psp.callbacks/3/1235", 1767225600, payment, SignatureHeader, "v1,Mky5CizUWZw8UjtTJR8yTouLRfRH35MhRXpIrnA7vVc="},
		{"raw secret, empty body", Config{Secret: rawSecret}, "psp.callbacks/3/1234", 1767225600, "", SignatureHeader, "v1,aqI8OvjL9uOzjZMGnVyyx75YbubquSj421IZooKUq7w="},
		{"binary body", Config{Secret: specSecret}, "s/1", 1767225600, "a\x00b\xff", SignatureHeader, "v1,XVL/loC8RR/BsFFdM2QwOXc7SLsCvQElT8fk8/AiKqU="},
		{"shaper, raw secret", Config{Scheme: Shaper, Secret: rawSecret}, "psp.callbacks/3/1234", 1767225600, payment, DefaultHeader, "t=1767225600,v2=a3f66c632a9a495f55dddf71d7f6880c96a63701820e6f8a70d3e047c0114bc3"},
		{"shaper, whsec secret, own header", Config{Scheme: Shaper, Secret: specSecret, Header: "x-psp-signature"}, "psp.callbacks/3/1234", 1767225600, payment, "X-Psp-Signature", "t=1767225600,v2=f21b87b94bc5b3dfbce4188af452ac5af040efc3618758d46da410c61055a476"},
		{"shaper, no id", Config{Scheme: Shaper, Secret: specSecret}, "", 1767225600, payment, DefaultHeader, "t=1767225600,v2=e0da946bc3478f4864c0d33487e5c87fa95495382da35c1176960db11e5f8f2d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSigner(t, tt.cfg)
			h := http.Header{}
			if err := s.Sign(h, tt.id, time.Unix(tt.at, 0), []byte(tt.body)); err != nil {
				t.Fatalf("Sign = %v", err)
			}
			if got := h.Get(tt.header); got != tt.want {
				t.Errorf("%s = %q; want %q", tt.header, got, tt.want)
			}
			if s.Scheme() == Standard {
				if h.Get("webhook-id") != tt.id || h.Get("webhook-timestamp") != strconv.FormatInt(tt.at, 10) {
					t.Errorf("webhook-id, webhook-timestamp = %q, %q; want %q, %d", h.Get("webhook-id"), h.Get("webhook-timestamp"), tt.id, tt.at)
				}
			} else if got := h.Values("Idempotency-Key"); tt.id == "" && len(got) != 0 || tt.id != "" && (len(got) != 1 || got[0] != tt.id) {
				t.Errorf("Idempotency-Key = %q; want %q (none when empty)", got, tt.id)
			}
			if err := s.Verify(h, []byte(tt.body), time.Minute, time.Unix(tt.at, 0)); err != nil {
				t.Errorf("Verify of its own signature = %v; want nil", err)
			}
		})
	}
}

// TestSignatureCoversTheID: two messages with the same body signed in the
// same second get different signatures, and a captured signature does not
// verify under another id (a replay under a new Idempotency-Key).
func TestSignatureCoversTheID(t *testing.T) {
	at := time.Unix(1767225600, 0)
	for _, cfg := range []Config{{Scheme: Standard, Secret: specSecret}, {Scheme: Shaper, Secret: rawSecret}} {
		t.Run(string(cfg.Scheme), func(t *testing.T) {
			s := newSigner(t, cfg)
			first, second := http.Header{}, http.Header{}
			mustSign(t, s, first, "psp.callbacks/3/1234", at, payment)
			mustSign(t, s, second, "psp.callbacks/3/1235", at.Add(999*time.Millisecond), payment)
			sig := s.SignatureHeader()
			if first.Get(sig) == second.Get(sig) {
				t.Errorf("same body, same second, two ids: both signed %q; want different signatures", first.Get(sig))
			}

			// The replay: the first request's signature and body, another id.
			replay := first.Clone()
			replay.Set(IDHeader, "psp.callbacks/3/9999")
			replay.Set(IdempotencyKeyHeader, "psp.callbacks/3/9999")
			if err := s.Verify(replay, []byte(payment), time.Minute, at); !errors.Is(err, ErrBadSignature) {
				t.Errorf("Verify under another id = %v; want ErrBadSignature", err)
			}
			// The id moved into the body and back (a '.' in the id): no match.
			moved := first.Clone()
			moved.Set(IDHeader, "psp")
			moved.Set(IdempotencyKeyHeader, "psp")
			if err := s.Verify(moved, []byte("callbacks/3/1234."+payment), time.Minute, at); !errors.Is(err, ErrBadSignature) {
				t.Errorf("Verify with bytes moved from id to body = %v; want ErrBadSignature", err)
			}
			if err := s.Verify(first, []byte(payment), time.Minute, at); err != nil {
				t.Errorf("Verify of the original = %v; want nil", err)
			}
		})
	}
}

func mustSign(t *testing.T, s *Signer, h http.Header, id string, at time.Time, body string) {
	t.Helper()
	if err := s.Sign(h, id, at, []byte(body)); err != nil {
		t.Fatalf("Sign(%q) = %v", id, err)
	}
}

func TestVerifyDetectsTamperingReplaysAndMalformedHeaders(t *testing.T) {
	at := time.Unix(1767225600, 0)
	body := []byte(payment)
	const id = "psp.callbacks/3/1234"
	std := newSigner(t, Config{Secret: specSecret})
	shp := newSigner(t, Config{Scheme: Shaper, Secret: rawSecret})
	stdH, shpH := http.Header{}, http.Header{}
	mustSign(t, std, stdH, id, at, payment)
	mustSign(t, shp, shpH, id, at, payment)
	stdSig, shpSig := stdH.Get(SignatureHeader), shpH.Get(DefaultHeader)
	_, shpMAC, _ := strings.Cut(shpSig, ",v2=")
	ts := strconv.FormatInt(at.Unix(), 10)

	// with returns the signed headers of s with name set to value ("" deletes).
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	other := newSigner(t, Config{Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-key-of-32-bytes-00000000"))})
	tests := []struct {
		name      string
		s         *Signer
		h         http.Header
		body      []byte
		tolerance time.Duration
		now       time.Time
		want      error // nil, ErrBadSignature or ErrStaleSignature
	}{
		{"standard valid", std, stdH, body, time.Minute, at.Add(30 * time.Second), nil},
		{"standard at the edge of the tolerance", std, stdH, body, time.Minute, at.Add(time.Minute), nil},
		{"standard default tolerance", std, stdH, body, 0, at.Add(4 * time.Minute), nil},
		{"standard rotation: any v1 matches, others ignored", std, with(stdH, SignatureHeader, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,abc "+stdSig+" junk"), body, time.Minute, at, nil},
		{"standard tampered body", std, stdH, []byte(`{"payment":4200,"status":"settled"}`), time.Minute, at, ErrBadSignature},
		{"standard body re-encoded", std, stdH, []byte(`{"payment": 42, "status": "settled"}`), time.Minute, at, ErrBadSignature},
		{"standard wrong key", other, stdH, body, time.Minute, at, ErrBadSignature},
		{"standard timestamp moved", std, with(stdH, TimestampHeader, strconv.FormatInt(at.Unix()+600, 10)), body, time.Minute, at.Add(10 * time.Minute), ErrBadSignature},
		{"standard stale replay", std, stdH, body, time.Minute, at.Add(time.Minute + time.Second), ErrStaleSignature},
		{"standard stale by default", std, stdH, body, 0, at.Add(6 * time.Minute), ErrStaleSignature},
		{"standard from the future", std, stdH, body, time.Minute, at.Add(-2 * time.Minute), ErrStaleSignature},
		{"standard no webhook-id", std, with(stdH, IDHeader, ""), body, time.Minute, at, ErrBadSignature},
		{"standard no timestamp", std, with(stdH, TimestampHeader, ""), body, time.Minute, at, ErrBadSignature},
		{"standard no signature", std, with(stdH, SignatureHeader, ""), body, time.Minute, at, ErrBadSignature},
		{"standard negative timestamp", std, with(stdH, TimestampHeader, "-"+ts), body, time.Minute, at, ErrBadSignature},
		{"standard huge timestamp", std, with(stdH, TimestampHeader, "99999999999999999999"), body, time.Minute, at, ErrBadSignature},
		{"standard v2 tag only", std, with(stdH, SignatureHeader, strings.Replace(stdSig, "v1,", "v2,", 1)), body, time.Minute, at, ErrBadSignature},
		{"standard signature truncated", std, with(stdH, SignatureHeader, stdSig[:20]), body, time.Minute, at, ErrBadSignature},
		{"shaper scheme's header to a standard verifier", std, shpH, body, time.Minute, at, ErrBadSignature},

		{"shaper valid", shp, shpH, body, time.Minute, at.Add(30 * time.Second), nil},
		{"shaper spaces and unknown entries ignored", shp, with(shpH, DefaultHeader, "t="+ts+", v1=abc, v2="+shpMAC+", x=1"), body, time.Minute, at, nil},
		{"shaper rotation: any v2 matches", shp, with(shpH, DefaultHeader, "t="+ts+",v2="+strings.Repeat("0", 64)+",v2="+shpMAC), body, time.Minute, at, nil},
		{"shaper version 1 format refused", shp, with(shpH, DefaultHeader, "t="+ts+",v1="+shpMAC), body, time.Minute, at, ErrBadSignature},
		{"shaper tampered body", shp, shpH, []byte(`{"payment":43}`), time.Minute, at, ErrBadSignature},
		{"shaper Idempotency-Key removed", shp, with(shpH, IdempotencyKeyHeader, ""), body, time.Minute, at, ErrBadSignature},
		{"shaper stale", shp, shpH, body, time.Minute, at.Add(2 * time.Minute), ErrStaleSignature},
		{"shaper no header", shp, with(shpH, DefaultHeader, ""), body, time.Minute, at, ErrBadSignature},
		{"shaper two timestamps", shp, with(shpH, DefaultHeader, "t="+ts+",t="+ts+",v2="+shpMAC), body, time.Minute, at, ErrBadSignature},
		{"shaper entry without =", shp, with(shpH, DefaultHeader, "t="+ts+",v2"+shpMAC), body, time.Minute, at, ErrBadSignature},
		{"shaper v2 not hex", shp, with(shpH, DefaultHeader, "t="+ts+",v2="+shpMAC[:62]+"zz"), body, time.Minute, at, ErrBadSignature},
		{"standard headers to a shaper verifier", shp, stdH, body, time.Minute, at, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Verify(tt.h, tt.body, tt.tolerance, tt.now)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v; want %v", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "MfKQ9r8G") || strings.Contains(err.Error(), rawSecret)) {
				t.Errorf("Verify error %q shows the secret", err)
			}
		})
	}
}

func TestKeyDecodesWhsecAndTakesOtherSecretsRaw(t *testing.T) {
	key32 := []byte("0123456789abcdef0123456789abcdef")
	// specKey is specSecret's key, decoded apart from this package (Python's
	// base64), as the signing vectors are.
	specKey := []byte("\x31\xf2\x90\xf6\xbf\x06\x29\x8a\xab\x4f\x08\xd4\x3c\x3f\x08\x2c\xf6\x48\xa3\x62\xda\x2d\xa4\xb0")
	tests := []struct {
		name    string
		secret  string
		want    []byte
		wantErr string // "" when valid
	}{
		{"whsec base64", "whsec_" + base64.StdEncoding.EncodeToString(key32), key32, ""},
		{"the spec's 24-byte key", specSecret, specKey, ""},
		{"raw bytes", rawSecret, []byte(rawSecret), ""},
		{"hex is raw too", "9f86d081884c7d659a2feaa0c55ad015", []byte("9f86d081884c7d659a2feaa0c55ad015"), ""},
		{"whsec- with a hyphen is raw", "whsec-0123456789abcdef", []byte("whsec-0123456789abcdef"), ""},
		{"empty", "", nil, "required"},
		{"raw too short", "0123456789abcde", nil, "at least 16 bytes, got 15"},
		{"whsec too short once decoded", "whsec_" + base64.StdEncoding.EncodeToString(key32[:15]), nil, "at least 16 bytes once decoded, got 15"},
		{"whsec not base64", "whsec_Sup3r$ecret!Sup3r$ecret!", nil, "not standard base64"},
		{"whsec without padding", "whsec_" + base64.RawStdEncoding.EncodeToString(key32), nil, "not standard base64"},
		{"whsec url alphabet", "whsec_" + base64.URLEncoding.EncodeToString([]byte{0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe, 0xfb, 0xff, 0xfe}), nil, "not standard base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Key(tt.secret)
			switch {
			case tt.wantErr == "" && (err != nil || string(got) != string(tt.want)):
				t.Errorf("Key = %q, %v; want %q", got, err, tt.want)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Key = %q, %v; want an error saying %q", got, err, tt.wantErr)
			case err != nil && len(tt.secret) > 8 && strings.Contains(err.Error(), strings.TrimPrefix(tt.secret, "whsec_")[:8]):
				t.Errorf("Key error %q shows the secret", err)
			}
		})
	}
}

func TestNewRefusesConfigsItCannotSignWith(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"header with the standard scheme", Config{Secret: rawSecret, Header: "X-Signature"}, "only the shaper scheme takes a header name"},
		{"unknown scheme", Config{Scheme: "stripe", Secret: rawSecret}, `unknown scheme "stripe"`},
		{"shaper header is Idempotency-Key", Config{Scheme: Shaper, Secret: rawSecret, Header: "idempotency-key"}, "carries the id"},
		{"shaper header name invalid", Config{Scheme: Shaper, Secret: rawSecret, Header: "X Sig"}, `invalid header name "X Sig"`},
		{"short secret", Config{Scheme: Shaper, Secret: "short-secret"}, "at least 16 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestSignRefusesIDsThatCannotBeHeaderValues(t *testing.T) {
	tests := []struct {
		scheme Scheme
		id     string
	}{
		{Standard, ""},
		{Standard, "a\nb"},
		{Shaper, "a\r\nX-Evil: 1"},
		{Shaper, "a\x00"},
	}
	for _, tt := range tests {
		s := newSigner(t, Config{Scheme: tt.scheme, Secret: rawSecret})
		if err := s.Sign(http.Header{}, tt.id, time.Now(), nil); err == nil {
			t.Errorf("%s: Sign(id %q) = nil; want an error", tt.scheme, tt.id)
		}
	}
}

// TestImportsOnlyTheStandardLibrary keeps the package importable by a
// receiver without the daemon's dependencies: every package it depends on,
// however indirectly, is in the standard library.
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const self = "github.com/shaper-dev/shaper/webhook"
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != self {
			t.Errorf("webhook depends on %s, which is not in the standard library", pkg)
		}
	}
	if !strings.Contains(string(out), self) {
		t.Fatalf("go list -deps printed %q; want at least %s itself", out, self)
	}
}
