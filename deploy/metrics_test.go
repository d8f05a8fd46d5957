package deploy_test

// The metrics that the dashboard and the alert rules query, checked against
// the /metrics of a running shaper and the descriptions of shaper.NewMetrics.

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/shaper"
)

// scrapedMetrics is what one /metrics scrape showed: each family's type, and
// the label names of its samples.
type scrapedMetrics struct {
	types   map[string]string          // family -> counter, gauge, histogram, ...
	samples map[string]map[string]bool // sample name (with _bucket etc.) -> label names
}

var expositionLabelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="`)

// parseExposition reads the Prometheus text format, enough for names, types
// and label names.
func parseExposition(text string) scrapedMetrics {
	m := scrapedMetrics{types: map[string]string{}, samples: map[string]map[string]bool{}}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if f := strings.Fields(rest); len(f) == 2 {
				m.types[f[0]] = f[1]
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				labels = line[i+1 : strings.LastIndex(line, "}")]
			}
		}
		if m.samples[name] == nil {
			m.samples[name] = map[string]bool{}
		}
		for _, mm := range expositionLabelRE.FindAllStringSubmatch(labels, -1) {
			m.samples[name][mm[1]] = true
		}
	}
	return m
}

// describedMetrics returns what shaper.NewMetrics registers, by name, with
// each metric's variable label names: the metrics whether or not they have a
// sample yet.
func describedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	rec := &descRecorder{names: map[string][]string{}}
	shaper.NewMetrics(rec)
	if len(rec.names) == 0 {
		t.Fatal("shaper.NewMetrics registered nothing")
	}
	return rec.names
}

// descRecorder is a prometheus.Registerer that keeps the descriptions of what
// is registered with it.
type descRecorder struct {
	names map[string][]string
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := descRE.FindStringSubmatch(d.String()); m != nil {
			var labels []string
			for _, l := range strings.Split(m[2], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					labels = append(labels, l)
				}
			}
			r.names[m[1]] = labels
		}
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c) // never fails
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// scrapeRunningShaper runs a real `shaper run` child process with two
// pipelines, one per broker it starts for the test (an embedded nats-server
// with JetStream, and Kafka as kfake), into an HTTP sink answering 204. It
// sends messages through both until they are delivered, so that the
// labelled series exist, and returns one scrape of its /metrics. It also
// checks the admin endpoints that the probes and the HEALTHCHECK of deploy/
// use.
func scrapeRunningShaper(t *testing.T) scrapedMetrics {
	t.Helper()
	const n = 8
	ns := natstest.Start(t)
	natstest.Stream(t, ns.ClientURL(), "DEPLOY", "deploy.callbacks")
	natstest.Publish(t, ns.ClientURL(), "deploy.callbacks", n)
	kc := kafkatest.Start(t, kfake.SeedTopics(4, "deploy"))
	kc.Produce("deploy", kafkatest.Records(n))
	sink := sinktest.Start(t, func(*http.Request, int) sinktest.Action {
		return sinktest.Action{Status: http.StatusNoContent}
	})

	config := childtest.WriteConfig(t, fmt.Sprintf(`
admin: {listen: "127.0.0.1:0"}
shutdown: {drain_timeout: 5s}
pipelines:
  - name: deploy-test-0
    source:
      nats: {url: "%s", subject: deploy.callbacks, stream: DEPLOY}
    bucket: {capacity: 100, max_queue_time: 10s}
    rate: {mode: leaky, limit: 200}
    sink:
      http: {url: "%s"}
  - name: deploy-test-1
    source: %s
    bucket: {capacity: 100, max_queue_time: 10s}
    rate: {mode: leaky, limit: 200}
    sink:
      http: {url: "%s"}
`, ns.ClientURL(), sink.URL, kafkatest.SourceYAML(kc.Addr, "deploy", "shaper-deploy"), sink.URL))
	c := childtest.Start(t, childtest.Config{Bin: shaperBin, Args: []string{"run", "--config", config}})
	admin := c.Admin()
	for _, p := range []string{"deploy-test-0", "deploy-test-1"} {
		c.WaitMetrics(45*time.Second, fmt.Sprintf("%d deliveries from %s", n, p), func(m childtest.Metrics) bool {
			return m.Sum("shaper_messages_completed_total", `pipeline="`+p+`"`, `outcome="delivered"`) >= n
		})
	}

	// The liveness and readiness probes of deploy/k8s and the image's
	// HEALTHCHECK.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := childtest.Get(admin, path); err != nil || code != http.StatusOK {
			t.Errorf("GET %s = %d %q, %v; want 200 from a running, connected shaper", path, code, body, err)
		}
	}
	code, body, err := childtest.Get(admin, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", code, err)
	}
	c.Stop()
	return parseExposition(body)
}

// notSampledByTheTestDaemon are metrics that exist only after events the
// daemon of scrapeRunningShaper does not cause, so they are checked against
// shaper.NewMetrics' descriptions instead of a live sample:
//   - shaper_messages_nacked_total{reason} gets its first series on the first
//     nack: a drain with messages left, or a dead letter with no target or a
//     failing one; every message of the test daemon is delivered.
//
// shaper_source_lag exists only for Kafka sources; the test daemon has one,
// so it is sampled live.
var notSampledByTheTestDaemon = []string{"shaper_messages_nacked_total"}

// prometheusSeries are series Prometheus itself writes for every target.
var prometheusSeries = map[string][]string{"up": {"job", "instance"}}

func TestGrafanaDashboardAndAlertRulesUseOnlyMetricsARunningShaperExports(t *testing.T) {
	exprs := loadDashboard(t).exprs()
	dashboardMetrics := map[string]bool{}
	for _, e := range exprs {
		for _, m := range promQLMetrics(e) {
			dashboardMetrics[m] = true
		}
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}

	live := scrapeRunningShaper(t)
	described := describedMetrics(t)

	// labelsOf returns the label names of a series name and whether shaper
	// exports it. A histogram is scraped as its _bucket, _sum and _count
	// series, so those names are looked up as they are.
	labelsOf := func(name string) ([]string, bool) {
		if labels, ok := prometheusSeries[name]; ok {
			return labels, true
		}
		if l, ok := live.samples[name]; ok {
			var out []string
			for k := range l {
				out = append(out, k)
			}
			return out, true
		}
		if slices.Contains(notSampledByTheTestDaemon, name) {
			labels, ok := described[name]
			return labels, ok
		}
		return nil, false
	}

	for where, e := range exprs {
		var labels []string
		for _, m := range promQLMetrics(e) {
			if strings.HasPrefix(where, "variable") && m == "pipeline" {
				continue // label_values(metric, label)
			}
			l, ok := labelsOf(m)
			if !ok {
				t.Errorf("%s uses %s, which a running shaper does not export", where, m)
			}
			labels = append(labels, l...)
		}
		for _, l := range promQLLabels(e) {
			if l != "le" && l != "job" && l != "instance" && !slices.Contains(labels, l) {
				t.Errorf("%s matches or groups by label %q, which none of its metrics %q has", where, l, promQLMetrics(e))
			}
		}
	}

	// A _bucket series (what histogram_quantile takes) must be a histogram's.
	for where, e := range exprs {
		for _, m := range promQLMetrics(e) {
			if base, ok := strings.CutSuffix(m, "_bucket"); ok && live.types[base] != "histogram" {
				t.Errorf("%s: %s is not the bucket of a histogram (%s is %q)", where, m, base, live.types[base])
			}
		}
	}

	// Every metric shaper describes is on the dashboard: nothing it exports
	// is invisible.
	for name := range described {
		onDashboard := dashboardMetrics[name]
		if live.types[name] == "histogram" {
			onDashboard = dashboardMetrics[name+"_bucket"]
		}
		if !onDashboard {
			t.Errorf("shaper exports %s, but the dashboard does not show it", name)
		}
	}
	// The allowlist stays honest: each name on it is a real shaper metric.
	for _, name := range notSampledByTheTestDaemon {
		if _, ok := described[name]; !ok {
			t.Errorf("notSampledByTheTestDaemon lists %s, which shaper.NewMetrics does not register", name)
		}
	}
}
