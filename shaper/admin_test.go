package shaper_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
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
	return do(t, req)
}

// do sends req and returns the answer's status and body.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
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
	rec := sinktest.Start(t, sinktest.OK)
	const n = 200
	e.publish(n)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) { c.Rate.Limit = 10 }))
	admin := p.serveAdmin(t, "s3cret", nil)

	for _, path := range []string{"/healthz", "/readyz"} {
		testwait.For(t, 10*time.Second, path+" 200", func() bool { code, _ := call(t, "GET", admin.URL+path, "", ""); return code == 200 })
	}
	testwait.For(t, 10*time.Second, "a few requests at 10/s", func() bool { return rec.RequestCount() >= 5 })

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
		{"duplicate key", "s3cret", "/v1/pipelines/test/rate", `{"limit": 50, "limit": 0.001}`, 400},
		{"data after the object", "s3cret", "/v1/pipelines/test/rate", `{"limit": 50} {"limit": 0.001}`, 400},
		{"key in another case", "s3cret", "/v1/pipelines/test/rate", `{"LIMIT": 50}`, 400},
		{"not an object", "s3cret", "/v1/pipelines/test/rate", `[50]`, 400},
		{"no limit", "s3cret", "/v1/pipelines/test/rate", `{"burst": 1}`, 400},
		{"limit overflowing the capacity", "s3cret", "/v1/pipelines/test/rate", `{"limit": 1e308}`, 400},
		{"limit above the maximum", "s3cret", "/v1/pipelines/test/rate", `{"limit": 1.6e17}`, 400},
		{"denormal limit", "s3cret", "/v1/pipelines/test/rate", `{"limit": 5e-324}`, 400},
		{"limit too low for max_queue_time", "s3cret", "/v1/pipelines/test/rate", `{"limit": 0.01}`, 400},
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
	testwait.For(t, 20*time.Second, "every message delivered", func() bool { return rec.RequestCount() == n })
	// The sink sees the new rate: count what arrived in the second from
	// 200ms after the change.
	from, to := changed.Add(200*time.Millisecond), changed.Add(1200*time.Millisecond)
	inSecond := 0
	for _, r := range rec.Requests() {
		if r.At.After(from) && !r.At.After(to) {
			inSecond++
		}
	}
	if inSecond < 40 || inSecond > 51 {
		t.Errorf("sink saw %d requests in the second after the change to 50/s; want about 50", inSecond)
	}

	// The sink counts a request before it answers; the pipeline settles it
	// after the answer has come back.
	settled := []string{`shaper_messages_completed_total{outcome="delivered",pipeline="test"} 200`,
		`shaper_in_flight{pipeline="test"} 0`, `shaper_bucket_depth{pipeline="test"} 0`}
	testwait.For(t, 10*time.Second, "the metrics of every message settled", func() bool {
		_, body := call(t, "GET", admin.URL+"/metrics", "", "")
		for _, want := range settled {
			if !strings.Contains(body, want) {
				return false
			}
		}
		return true
	})
	code, body = call(t, "GET", admin.URL+"/metrics", "", "")
	for _, want := range []string{
		`shaper_rate_limit{pipeline="test"} 50`,
		`shaper_messages_received_total{pipeline="test"} 200`,
		`shaper_messages_completed_total{outcome="delivered",pipeline="test"} 200`,
		`shaper_requests_total{code="ok",pipeline="test"} 200`,
		`shaper_bucket_capacity{pipeline="test"} 1000`,
		"shaper_queue_wait_seconds_bucket", "shaper_request_duration_seconds_bucket",
		`shaper_in_flight{pipeline="test"} 0`, `shaper_bucket_depth{pipeline="test"} 0`,
		`shaper_limiter_fallback{pipeline="test"} 0`,
		`shaper_limiter_unused_total{pipeline="test"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

// Without a token no change goes through, on loopback too: any process on
// the host could otherwise push the backlog past max_queue_time.
func TestAdminChangesNeedATokenEvenOnLoopback(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, nil))
	admin := p.serveAdmin(t, "", nil)
	code, body := call(t, "PUT", admin.URL+"/v1/pipelines/test/rate", "", `{"limit": 50}`)
	if code != http.StatusForbidden || !strings.Contains(body, "admin.token") {
		t.Errorf("PUT rate without a configured token = %d %q; want 403 saying how to set admin.token", code, body)
	}
	if code, _ := call(t, "PUT", admin.URL+"/v1/pipelines/test/rate", "anything", `{"limit": 50}`); code != http.StatusForbidden {
		t.Errorf("PUT rate with a bearer token but none configured = %d; want 403", code)
	}
	if got := p.Status().Limit; got != 100 {
		t.Errorf("limit = %v; want 100, unchanged", got)
	}
}

func TestAdminLogsEveryAcceptedChangeWithTheCallerAndTheValues(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, nil))
	var logs logtest.Buffer
	const token = "0123456789abcdef-admin"
	admin := p.serveAdmin(t, token, slog.New(slog.NewJSONHandler(&logs, nil)))
	if code, body := call(t, "PUT", admin.URL+"/v1/pipelines/test/rate", token, `{"limit": 40}`); code != 200 {
		t.Fatalf("PUT rate 40 = %d %q; want 200", code, body)
	}
	var line struct {
		Msg      string  `json:"msg"`
		Pipeline string  `json:"pipeline"`
		Remote   string  `json:"remote"`
		OldLimit float64 `json:"old_limit"`
		Limit    float64 `json:"limit"`
	}
	if err := json.Unmarshal([]byte(logs.String()), &line); err != nil {
		t.Fatalf("admin log = %q: %v; want one JSON line", logs.String(), err)
	}
	if line.Pipeline != "test" || !strings.HasPrefix(line.Remote, "127.0.0.1:") || line.OldLimit != 100 || line.Limit != 40 {
		t.Errorf("admin log = %+v; want pipeline test, remote 127.0.0.1:port, old_limit 100, limit 40", line)
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("admin log contains the token: %q", logs.String())
	}
}

func TestReadyzIsUnavailableWhileDraining(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, nil))
	admin := p.serveAdmin(t, "", nil)
	testwait.For(t, 10*time.Second, "/readyz 200", func() bool { code, _ := call(t, "GET", admin.URL+"/readyz", "", ""); return code == 200 })
	p.Drain()
	code, body := call(t, "GET", admin.URL+"/readyz", "", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "test: draining") {
		t.Errorf("/readyz while draining = %d %q; want 503 naming the pipeline", code, body)
	}
}

// A pipeline that expires more than it sends says so: state stalled,
// /readyz 503 with the reason, shaper_expired_per_second above 0; and it
// recovers once the sink does.
func TestAPipelineThatExpiresMoreThanItSendsIsStalledAndNotReady(t *testing.T) {
	e := newEnv(t)
	var slow atomic.Bool
	slow.Store(true)
	rec := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		if slow.Load() {
			return sinktest.Action{Delay: 2 * time.Second}
		}
		return sinktest.Action{}
	})
	e.publish(2000)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Rate.Limit = 20
		c.Bucket.MaxQueueTime = 500 * time.Millisecond // capacity 10: 9 wait while one hangs
		c.Sink.HTTP.MaxInFlight = 1
		c.Sink.HTTP.Timeout = 5 * time.Second
	}))
	admin := p.serveAdmin(t, "", nil)

	testwait.For(t, 20*time.Second, "state stalled", func() bool { return p.Status().State == shaper.StateStalled })
	code, body := call(t, "GET", admin.URL+"/readyz", "", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "test: stalled:") {
		t.Errorf("/readyz while stalled = %d %q; want 503 saying the pipeline is stalled", code, body)
	}
	st := p.Status()
	_, metrics := call(t, "GET", admin.URL+"/metrics", "", "")
	if st.ExpiredPerSecond <= 0 || !strings.Contains(metrics, `shaper_expired_per_second{pipeline="test"}`) ||
		strings.Contains(metrics, `shaper_expired_per_second{pipeline="test"} 0`+"\n") {
		t.Errorf("expired_per_second = %v and the metric is not above 0; want both above 0", st.ExpiredPerSecond)
	}
	t.Logf("stalled: %s; expired_per_second %.1f", st.NotReady, st.ExpiredPerSecond)

	slow.Store(false)
	testwait.For(t, 30*time.Second, "state running again", func() bool { return p.Status().State == shaper.StateRunning })
	if code, body := call(t, "GET", admin.URL+"/readyz", "", ""); code != 200 {
		t.Errorf("/readyz after the sink recovered = %d %q; want 200", code, body)
	}
}

// GET /v1/pipelines carries what the status page draws: received beside
// the outcomes (rates in and out), the oldest wait beside max_queue_time,
// and key_from when the pipeline keeps lanes.
func TestStatusReportsReceivedAndTheOldestWait(t *testing.T) {
	e := newEnv(t)
	rec := sinktest.Start(t, sinktest.OK)
	p := e.start(e.config(rec.URL, func(c *config.Pipeline) {
		c.Key = &shaper.KeyConfig{From: "header:Merchant-Id"}
	}))
	admin := p.serveAdmin(t, "", nil)
	p.Pause()
	published := time.Now()
	e.publishKeyed("m-1", 3)
	e.publishKeyed("m-2", 2)
	status := func() shaper.Status {
		t.Helper()
		code, body := call(t, "GET", admin.URL+"/v1/pipelines", "", "")
		var list []shaper.Status
		if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 1 {
			t.Fatalf("GET /v1/pipelines = %d %q (%v); want one pipeline", code, body, err)
		}
		return list[0]
	}
	testwait.For(t, 10*time.Second, "5 received", func() bool { return status().Received == 5 })
	time.Sleep(200 * time.Millisecond) // the oldest message waits on while paused
	st := status()
	if st.Depth != 5 || st.OldestWait < 0.2 || st.OldestWait > time.Since(published).Seconds() ||
		st.MaxQueueTime != 60 || st.KeyFrom != "header:Merchant-Id" || st.Outcomes[shaper.OutcomeDelivered] != 0 {
		t.Errorf("status while paused = %+v; want depth 5, oldest wait from 0.2s to %.2fs, max_queue_time 60s, key_from header:Merchant-Id, none delivered",
			st, time.Since(published).Seconds())
	}

	p.Resume()
	testwait.For(t, 10*time.Second, "5 delivered", func() bool { return status().Outcomes[shaper.OutcomeDelivered] == 5 })
	if st := status(); st.Received != 5 || st.OldestWait != 0 || st.Depth != 0 {
		t.Errorf("status once all is delivered = %+v; want received 5, oldest wait 0, depth 0", st)
	}
	if got := p.metric("shaper_messages_received_total"); got != 5 {
		t.Errorf("shaper_messages_received_total = %v; want 5, as received", got)
	}
}
