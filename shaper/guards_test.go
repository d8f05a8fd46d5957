package shaper_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// maxKeyLength is key.max_length's default.
const maxKeyLength = 256

// Keys of 60 KiB reach the admin API as their sha256 form,
// and GET /v1/pipelines/{name}/keys?top=1000 stays within 1 MiB, saying
// when it left lanes out. Sizes are asserted, not memory.
func TestLongKeysAreHashedAndTheKeysAnswerStaysWithin1MiB(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
		c.Bucket.Capacity = 2000
	}))
	admin := p.serveAdmin(t, "", nil)
	p.Pause()

	// Three keys of 60 KiB, two messages each (the deepest lanes), and
	// 1000 keys of 256 bytes (key.max_length, kept as they are) that JSON
	// escapes to about 1.5 KB each.
	var long []string
	for i := range 3 {
		k := fmt.Sprintf("%d", i) + strings.Repeat("m", 60<<10)
		long = append(long, k)
		e.publishKeyed(k, 2)
	}
	const escaped = 1000
	for i := range escaped {
		e.publishHeader("Merchant-Id", fmt.Sprintf("%04d", i)+strings.Repeat("<", maxKeyLength-4), "e", 1)
	}
	testwait.For(t, 30*time.Second, "every message in the bucket", func() bool { return p.Status().Received == 6+escaped })

	get := func(top string) (*http.Response, []byte) {
		t.Helper()
		resp, err := http.Get(admin.URL + "/v1/pipelines/test/keys?top=" + top)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	resp, body := get("1000")
	var keys []shaper.KeyStatus
	if err := json.Unmarshal(body, &keys); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET keys?top=1000 = %s, %d bytes (%v); want 200 and a JSON list", resp.Status, len(body), err)
	}
	t.Logf("top=1000: %d bytes, %d lanes, %s: %q", len(body), len(keys), "Shaper-Truncated", resp.Header.Get("Shaper-Truncated"))
	if len(body) > 1<<20 {
		t.Errorf("answer of %d bytes; want at most 1 MiB (%d)", len(body), 1<<20)
	}
	if len(keys) == 0 || len(keys) >= 3+escaped || resp.Header.Get("Shaper-Truncated") != "true" {
		t.Errorf("%d lanes of %d, Shaper-Truncated %q; want some but not all, and Shaper-Truncated: true",
			len(keys), 3+escaped, resp.Header.Get("Shaper-Truncated"))
	}
	var want, got []string
	for _, k := range long {
		sum := sha256.Sum256([]byte(k))
		want = append(want, "sha256:"+hex.EncodeToString(sum[:]))
	}
	for i, k := range keys {
		if len(k.Key) > maxKeyLength {
			t.Errorf("lane %d: key of %d bytes; want at most key.max_length (%d)", i, len(k.Key), maxKeyLength)
		}
		if i < len(long) {
			got = append(got, k.Key)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the three deepest lanes are %.100q; want the 60 KiB keys' sha256 forms %q", got, want)
	}

	if resp, body := get("10"); resp.StatusCode != 200 || resp.Header.Get("Shaper-Truncated") != "" || strings.Count(string(body), `"key"`) != 10 {
		t.Errorf("GET keys?top=10 = %s, Shaper-Truncated %q, %d bytes; want 200, all ten lanes, not truncated", resp.Status, resp.Header.Get("Shaper-Truncated"), len(body))
	}
	if resp, _ := get("1001"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET keys?top=1001 = %s; want 400: top is at most 1000", resp.Status)
	}
}

// The admin server answers 421 to a Host that is not its own
// (DNS rebinding: a page of evil.example, its name pointed at 127.0.0.1,
// would read the keys), on every path; loopback names and addresses with
// any port, and admin.allowed_hosts, are answered.
func TestAdminAnswers421ToAHostThatIsNotItsOwn(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
	}))
	p.Pause()
	e.publishKeyed("merchant-7", 1)
	testwait.For(t, 10*time.Second, "the message in the bucket", func() bool { return p.Status().Received == 1 })

	srv := httptest.NewServer(shaper.Admin(p.list, p.registry, "", shaper.AdminHosts{
		Listen: "127.0.0.1:9090", Allowed: []string{"shaper", "shaper-ingress.example:443"},
	}, nil))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	get := func(host, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		return do(t, req)
	}
	for _, host := range []string{"evil.example:" + port, "evil.example", "shaper.evil.example:" + port, "shaper-ingress.example:" + port, "0x7f.1:" + port} {
		for _, path := range []string{"/v1/pipelines/test/keys", "/v1/pipelines", "/", "/metrics", "/healthz", "/readyz"} {
			code, body := get(host, path)
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "merchant-7") ||
				!strings.Contains(body, fmt.Sprintf("%q", host)) || !strings.Contains(body, "admin.allowed_hosts") {
				t.Errorf("Host %s GET %s = %d %q; want 421 naming the Host and admin.allowed_hosts", host, path, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.", "127.0.0.2", "[::1]:" + port, "shaper:9090", "Shaper", "shaper-ingress.example:443"} {
		if code, body := get(host, "/v1/pipelines/test/keys"); code != 200 || !strings.Contains(body, "merchant-7") {
			t.Errorf("Host %s GET /v1/pipelines/test/keys = %d %q; want 200 with the key", host, code, body)
		}
	}
}

// The admin port serves the status page, its stylesheet and its script,
// and every answer (the page, its files, the API) carries the headers that
// keep the page to itself: scripts from the port only and none inline, no
// MIME sniffing, no framing.
func TestAdminServesTheStatusPageWithItsSecurityHeaders(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, nil))
	admin := p.serveAdmin(t, "", nil)

	tests := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="statuspage.js" defer></script>`},
		{"/statuspage.css", "text/css; charset=utf-8", ".pipeline"},
		{"/statuspage.js", "text/javascript; charset=utf-8", "v1/pipelines"},
		{"/v1/pipelines", "application/json", `"received"`},
	}
	for _, tt := range tests {
		resp, err := http.Get(admin.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body := new(strings.Builder)
		_, err = io.Copy(body, resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Type") != tt.contentType || !strings.Contains(body.String(), tt.contains) {
			t.Errorf("GET %s = %d %q, %d bytes; want 200 %q containing %q", tt.path, resp.StatusCode, h.Get("Content-Type"), body.Len(), tt.contentType, tt.contains)
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s headers: CSP %q, X-Content-Type-Options %q, X-Frame-Options %q; "+
				"want default-src 'self' and frame-ancestors 'none', nosniff, DENY",
				tt.path, csp, h.Get("X-Content-Type-Options"), h.Get("X-Frame-Options"))
		}
		if tt.path == "/" && inlineCode.MatchString(body.String()) {
			t.Errorf("GET / has inline script or style (%q); the CSP forbids it", inlineCode.FindString(body.String()))
		}
	}
	for _, path := range []string{"/index.html", "/statuspage", "/nope.js"} {
		if code, _ := call(t, "GET", admin.URL+path, "", ""); code != http.StatusNotFound {
			t.Errorf("GET %s = %d; want 404", path, code)
		}
	}
}

// inlineCode finds what default-src 'self' would block in the page: a
// <script> with a body, a <style> element, a style="" attribute, or an
// on...="" handler.
var inlineCode = regexp.MustCompile(`<script(\s[^>]*)?>\s*[^<\s]|<style|\sstyle=|\son[a-z]+=`)
