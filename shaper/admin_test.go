package shaper_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminAPIReportsPipelinesAndChangesTheRateTheSinkSees(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder(t, nil)
	const n = 200
	e.publish(n)
	p := e.start(e.config(rec.srv.URL, func(c *shaper.PipelineConfig) { c.Rate.Limit = 10 }))
	admin := httptest.NewServer(shaper.Admin(p.list, p.registry, "s3cret"))
	defer admin.Close()

	for _, path := range []string{"/healthz", "/readyz"} {
		waitFor(t, 10*time.Second, path+" 200", func() bool { code, _ := call(t, "GET", admin.URL+path, "", ""); return code == 200 })
	}
	waitFor(t, 10*time.Second, "a few requests at 10/s", func() bool { return rec.count() >= 5 })

	code, body := call(t, "GET", admin.URL+"/v1/pipelines", "", "")
	var list []shaper.Status
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 1 {
		t.Fatalf("GET /v1/pipelines = %d %q (%v); want one pipeline", code, body, err)
	}
	st := list[0]
	if st.Name != "test" || st.Mode != "leaky" || st.Limit != 10 || st.Capacity != 600 || st.Depth == 0 || !st.Ready || st.Limiter != "local" {
		t.Errorf("status = %+v; want test, leaky, 10/s, capacity 600 (10/s × 1m), depth > 0, ready, local limiter", st)
	}

	tests := []struct {
		name, token, path, body string
		want                    int
	}{
		{"no token", "", "/v1/pipelines/test/rate", `{"limit": 50}`, 401},
		{"wrong token", "guess", "/v1/pipelines/test/rate", `{"limit": 50}`, 401},
		{"unknown pipeline", "s3cret", "/v1/pipelines/nope/rate", `{"limit": 50}`, 404},
		{"bad json", "s3cret", "/v1/pipelines/test/rate", `{"limit": }`, 400},
		{"unknown field", "s3cret", "/v1/pipelines/test/rate", `{"limit": 5, "rate": 5}`, 400},
		{"zero limit", "s3cret", "/v1/pipelines/test/rate", `{"limit": 0}`, 400},
		{"burst in leaky mode", "s3cret", "/v1/pipelines/test/rate", `{"limit": 5, "burst": 3}`, 400},
		{"body too large", "s3cret", "/v1/pipelines/test/rate", `{"limit": 5` + strings.Repeat(" ", 8192) + `}`, 400},
	}
	for _, tt := range tests {
		if code, body := call(t, "PUT", admin.URL+tt.path, tt.token, tt.body); code != tt.want {
			t.Errorf("%s: PUT %s = %d %q; want %d", tt.name, tt.path, code, body, tt.want)
		}
	}
	if got := p.Status().Limit; got != 10 {
		t.Fatalf("limit after refused changes = %v; want 10", got)
	}

	if code, body := call(t, "PUT", admin.URL+"/v1/pipelines/test/rate", "s3cret", `{"limit": 50, "burst": 1}`); code != 200 {
		t.Fatalf("PUT rate 50 = %d %q; want 200", code, body)
	}
	changed := time.Now()
	waitFor(t, 20*time.Second, "every message delivered", func() bool { return rec.count() == n })
	// The sink sees the new rate: count what arrived in the second from
	// 200ms after the change.
	from, to := changed.Add(200*time.Millisecond), changed.Add(1200*time.Millisecond)
	inSecond := 0
	for _, r := range rec.requests() {
		if r.at.After(from) && !r.at.After(to) {
			inSecond++
		}
	}
	if inSecond < 40 || inSecond > 51 {
		t.Errorf("sink saw %d requests in the second after the change to 50/s; want about 50", inSecond)
	}

	code, body = call(t, "GET", admin.URL+"/metrics", "", "")
	for _, want := range []string{
		`shaper_rate_limit{pipeline="test"} 50`,
		`shaper_messages_received_total{pipeline="test"} 200`,
		`shaper_messages_completed_total{outcome="delivered",pipeline="test"} 200`,
		`shaper_requests_total{code="200",pipeline="test"} 200`,
		`shaper_bucket_capacity{pipeline="test"} 1000`,
		"shaper_queue_wait_seconds_bucket", "shaper_request_duration_seconds_bucket",
		`shaper_in_flight{pipeline="test"} 0`, `shaper_bucket_depth{pipeline="test"} 0`,
		`shaper_limiter_fallback{pipeline="test"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

func TestReadyzIsUnavailableWhileDraining(t *testing.T) {
	e := newEnv(t)
	rec := newRecorder(t, nil)
	p := e.start(e.config(rec.srv.URL, nil))
	admin := httptest.NewServer(shaper.Admin(p.list, p.registry, ""))
	defer admin.Close()
	waitFor(t, 10*time.Second, "/readyz 200", func() bool { code, _ := call(t, "GET", admin.URL+"/readyz", "", ""); return code == 200 })
	p.Drain()
	code, body := call(t, "GET", admin.URL+"/readyz", "", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "test: draining") {
		t.Errorf("/readyz while draining = %d %q; want 503 naming the pipeline", code, body)
	}
}
