package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// shaper healthcheck is the image's HEALTHCHECK (the Dockerfile's tests are
// in package deploy): it exits 0 and says ok when /healthz answers 200, and
// exits 1 on anything else.
func TestDockerHealthcheckSubcommandReportsHealthAndFailure(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	if code, out, errs := runMain(t, "healthcheck", "--url", healthy.URL+"/healthz"); code != exitOK || out != "ok\n" {
		t.Errorf("healthcheck against a healthy server = %d, %q, %q; want 0, \"ok\\n\"", code, out, errs)
	}
	if code, _, _ := runMain(t, "healthcheck", "--url", healthy.URL+"/elsewhere"); code != exitRuntime {
		t.Errorf("healthcheck against a 404 = %d; want %d", code, exitRuntime)
	}
	healthy.CloseClientConnections()
}
