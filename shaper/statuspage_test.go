package shaper_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/sinktest"
)

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
