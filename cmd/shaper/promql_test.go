package main

// A small PromQL scanner that the dashboard and alert tests share: balanced
// brackets and quotes, metric names, label names.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// promQLBalanced reports unbalanced brackets or quotes in a PromQL expression.
func promQLBalanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for _, r := range expr {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", append(stack, quote))
	}
	return nil
}

var (
	promStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promGrafanaVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\[\[[A-Za-z_][A-Za-z0-9_]*\]\]`)
	promBracesRE   = regexp.MustCompile(`\{[^}]*\}`)
	promRangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promTokenRE    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*|[0-9][0-9A-Za-z_.]*`)
	promSelectorRE = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	promMatcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)

	// promKeywords are PromQL words that look like metric names: aggregation
	// operators (which may be followed by "by (...)" before their
	// parenthesis), binary operators and modifiers.
	promKeywords = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true,
		"limit_ratio": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true,
	}
)

// promQLMetrics returns the metric names an expression selects, Grafana
// variables left out. A word followed by "(" is a function.
func promQLMetrics(expr string) []string {
	s := promGrafanaVar.ReplaceAllString(expr, "0")
	s = promStringRE.ReplaceAllString(s, `""`)
	s = promBracesRE.ReplaceAllString(s, " ")
	s = promRangeRE.ReplaceAllString(s, " ")
	s = promGroupingRE.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promTokenRE.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || promKeywords[tok] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function call
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	return out
}

// promQLLabels returns the label names an expression matches on or groups by.
func promQLLabels(expr string) []string {
	s := promGrafanaVar.ReplaceAllString(expr, "0")
	var out []string
	for _, m := range promSelectorRE.FindAllStringSubmatch(promStringRE.ReplaceAllString(s, `""`), -1) {
		for _, mm := range promMatcherRE.FindAllStringSubmatch(m[2], -1) {
			out = append(out, mm[1])
		}
	}
	for _, m := range promGroupingRE.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
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
		{`label_values(shaper_messages_received_total, pipeline)`, []string{"shaper_messages_received_total", "pipeline"}, nil},
		{`max by (pipeline, instance) (shaper_limiter_fallback) == 1`, []string{"shaper_limiter_fallback"}, []string{"instance", "pipeline"}},
	}
	for _, tt := range tests {
		if got := promQLMetrics(tt.give); !slices.Equal(got, tt.wantMetric) {
			t.Errorf("promQLMetrics(%q) = %q; want %q", tt.give, got, tt.wantMetric)
		}
		if got := promQLLabels(tt.give); !slices.Equal(got, tt.wantLabels) {
			t.Errorf("promQLLabels(%q) = %q; want %q", tt.give, got, tt.wantLabels)
		}
	}
}

// scrapedMetrics is what one /metrics scrape showed: each family's type, and
