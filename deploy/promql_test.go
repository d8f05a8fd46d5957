package deploy_test

// PromQL as Prometheus reads it, for the dashboard, alert and PrometheusRule
// tests: every expression goes through Prometheus's own parser
// (promql/parser), so a query Prometheus would refuse fails here, and the
// metric names, label names and matchers are read off its syntax tree.

import (
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/shaper-dev/shaper/shaper"
)

// promQLQuery is what one expression selects.
type promQLQuery struct {
	metrics  []string          // metric names, in order of first use
	labels   []string          // label names matched on or grouped by, sorted
	matchers []*labels.Matcher // label matchers of the selectors, __name__ left out
}

var (
	// grafanaRangeVar is a Grafana variable that stands for a duration
	// ($__rate_interval in [$__rate_interval]).
	grafanaRangeVar = regexp.MustCompile(`\$__(?:rate_interval|interval|range)\b|\$\{__(?:rate_interval|interval|range)\}`)
	// grafanaVar is any other Grafana variable: $name, ${name}, [[name]].
	// In the dashboard they stand inside label values (pipeline=~"$pipeline").
	grafanaVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\[\[[A-Za-z_][A-Za-z0-9_]*\]\]`)
	// grafanaLabelValues is Grafana's label_values(metric, label) variable
	// query, which is not PromQL.
	grafanaLabelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

	promParser = parser.NewParser(parser.Options{})
)

// parsePromQL parses a PromQL expression, or a Grafana query holding one:
// Grafana's duration variables become 1m, its other variables .*, and
// label_values(metric, label) selects metric and names label.
func parsePromQL(expr string) (promQLQuery, error) {
	var extraLabel string
	if m := grafanaLabelValues.FindStringSubmatch(expr); m != nil {
		expr, extraLabel = m[1], m[2]
	}
	s := grafanaRangeVar.ReplaceAllString(expr, "1m")
	s = grafanaVar.ReplaceAllString(s, ".*")
	tree, err := promParser.ParseExpr(s)
	if err != nil {
		return promQLQuery{}, err
	}
	var q promQLQuery
	addLabels := func(names ...string) {
		for _, l := range names {
			if l != labels.MetricName {
				q.labels = append(q.labels, l)
			}
		}
	}
	addLabels(extraLabel)
	parser.Inspect(tree, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value // {__name__="metric"}
				}
			}
			if name != "" && !slices.Contains(q.metrics, name) {
				q.metrics = append(q.metrics, name)
			}
			for _, m := range n.LabelMatchers {
				if m.Name != labels.MetricName {
					q.matchers = append(q.matchers, m)
					addLabels(m.Name)
				}
			}
		case *parser.AggregateExpr:
			addLabels(n.Grouping...)
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				addLabels(vm.MatchingLabels...)
				addLabels(vm.Include...)
			}
		}
		return nil
	})
	q.labels = slices.DeleteFunc(q.labels, func(l string) bool { return l == "" })
	slices.Sort(q.labels)
	q.labels = slices.Compact(q.labels)
	return q, nil
}

// promQLMetrics returns the metric names an expression selects; nothing for
// one that does not parse (the tests of each file report that).
func promQLMetrics(expr string) []string {
	q, _ := parsePromQL(expr)
	return q.metrics
}

// promQLLabels returns the label names an expression matches on or groups
// by; nothing for one that does not parse.
func promQLLabels(expr string) []string {
	q, _ := parsePromQL(expr)
	return q.labels
}

func TestDeployPromQLHelpersFindMetricNamesAndLabels(t *testing.T) {
	tests := []struct {
		give       string
		wantMetric []string
		wantLabels []string
	}{
		{`sum by (pipeline) (irate(shaper_messages_received_total{pipeline=~"$pipeline"}[$__rate_interval]))`,
			[]string{"shaper_messages_received_total"}, []string{"pipeline"}},
		{`histogram_quantile(0.99, sum by (pipeline, le) (rate(shaper_queue_wait_seconds_bucket[5m]))) > 0.8 * 45`,
			[]string{"shaper_queue_wait_seconds_bucket"}, []string{"le", "pipeline"}},
		{`sum(rate(a_total{code!~"2.."}[5m])) / sum (rate(a_total[5m])) > bool 0.05 and on(x) b`,
			[]string{"a_total", "b"}, []string{"code", "x"}},
		{`label_values(shaper_messages_received_total, pipeline)`, []string{"shaper_messages_received_total"}, []string{"pipeline"}},
		{`max by (pipeline, instance) (shaper_limiter_fallback) == 1`, []string{"shaper_limiter_fallback"}, []string{"instance", "pipeline"}},
		{`a > 0.5 or b / ignoring(partition) group_left(code) c > 0.5`, []string{"a", "b", "c"}, []string{"code", "partition"}},
		{`{__name__="a", job=~"${job}"}`, []string{"a"}, []string{"job"}},
	}
	for _, tt := range tests {
		q, err := parsePromQL(tt.give)
		if err != nil {
			t.Errorf("parsePromQL(%q): %v", tt.give, err)
			continue
		}
		if !slices.Equal(q.metrics, tt.wantMetric) {
			t.Errorf("parsePromQL(%q) metrics = %q; want %q", tt.give, q.metrics, tt.wantMetric)
		}
		if !slices.Equal(q.labels, tt.wantLabels) {
			t.Errorf("parsePromQL(%q) labels = %q; want %q", tt.give, q.labels, tt.wantLabels)
		}
	}
}

func TestDeployPromQLRefusesWhatPrometheusRefuses(t *testing.T) {
	for _, give := range []string{
		`rate(shaper_requests_total)`,                    // a range vector is wanted
		`sum by pipeline (shaper_bucket_depth)`,          // grouping needs parentheses
		`histogram_quantil(0.99, shaper_x_bucket)`,       // no such function
		`sum(rate(shaper_requests_total[5m])`,            // unbalanced
		`shaper_rate_limit{pipeline=~"$pipeline}`,        // unclosed string
		`label_values(shaper_messages_received_total)`,   // label_values without a label is not PromQL
		`shaper_in_flight > on(pipeline) group_left 1.5`, // group_left between a vector and a scalar
	} {
		if _, err := parsePromQL(give); err == nil {
			t.Errorf("parsePromQL(%q) = nil error; want Prometheus's parse error", give)
		}
	}
}

// deployQueries returns every PromQL expression of deploy/: the dashboard's
// panels and variables and the alert rules (the PrometheusRule carries the
// same rules: TestKubePrometheusRuleCarriesTheAlertRules), by where they are.
func deployQueries(t *testing.T) map[string]string {
	t.Helper()
	out := loadDashboard(t).exprs()
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	return out
}

// labelValuesShaperWrites are the values shaper gives its enumerated labels,
// each with the test that a value matched on must pass.
var labelValuesShaperWrites = map[string]struct {
	known []string          // every value, or examples where they are open-ended
	valid func(string) bool // whether a value is one shaper writes
}{
	"outcome": {
		known: []string{string(shaper.OutcomeDelivered), string(shaper.OutcomeDeadLettered), string(shaper.OutcomeExpired), string(shaper.OutcomeDropped)},
	},
	"reason": {
		known: []string{string(shaper.NackShutdown), string(shaper.NackRevoked), string(shaper.NackNoDeadLetter), string(shaper.NackDeadLetterFailed), string(shaper.NackLaneFull)},
	},
	"code": { // shaper.RequestCode
		known: []string{"ok", "error", "400", "404", "429", "500", "502", "503", "504"},
		valid: regexp.MustCompile(`^(ok|error|[1-5][0-9][0-9])$`).MatchString,
	},
}

// TestDeployPromQLMatchesOnlyLabelValuesShaperWrites checks the values of the
// outcome, reason and code matchers: a misspelt value (reason="lane-full")
// selects nothing, and its panel stays empty and its alert silent.
func TestDeployPromQLMatchesOnlyLabelValuesShaperWrites(t *testing.T) {
	checked := 0
	for where, expr := range deployQueries(t) {
		q, err := parsePromQL(expr)
		if err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
			continue
		}
		for _, m := range q.matchers {
			vals, ok := labelValuesShaperWrites[m.Name]
			if !ok {
				continue
			}
			checked++
			switch m.Type {
			case labels.MatchEqual, labels.MatchNotEqual:
				valid := slices.Contains(vals.known, m.Value) || vals.valid != nil && vals.valid(m.Value)
				if !valid {
					t.Errorf("%s: %s: shaper never writes %s=%q (it writes %q)", where, m, m.Name, m.Value, vals.known)
				}
			case labels.MatchRegexp, labels.MatchNotRegexp:
				if !slices.ContainsFunc(vals.known, func(v string) bool { return m.Matches(v) != (m.Type == labels.MatchNotRegexp) }) {
					t.Errorf("%s: %s matches none of the values shaper writes (%q)", where, m, vals.known)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no outcome, reason or code matcher found in deploy/: the test checks nothing")
	}
}

// alertJobs returns the job label values the alert rules match on: the
// scrape job (compose) or the Service behind the ServiceMonitor (Kubernetes)
// must have that name.
func alertJobs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			q, err := parsePromQL(r.Expr)
			if err != nil {
				t.Fatalf("alert %s: %v", r.Alert, err)
			}
			for _, m := range q.matchers {
				if m.Name == "job" {
					if m.Type != labels.MatchEqual {
						t.Fatalf("alert %s: %s: want job=\"name\"", r.Alert, m)
					}
					if !slices.Contains(out, m.Value) {
						out = append(out, m.Value)
					}
				}
			}
		}
	}
	return out
}
