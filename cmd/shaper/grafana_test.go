package main

// Tests of the Grafana dashboard deploy/grafana/dashboards/shaper.json.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

type grafanaPanel struct {
	Title   string         `json:"title"`
	Type    string         `json:"type"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	var d grafanaDashboard
	path := filepath.Join(deployDir, "grafana", "dashboards", "shaper.json")
	if err := json.Unmarshal(readRepoFile(t, path), &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// exprs returns every PromQL expression of the dashboard: panel targets and
// query variables, by where they are.
func (d grafanaDashboard) exprs() map[string]string {
	out := map[string]string{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			for i, tg := range p.Targets {
				if tg.Expr != "" {
					out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out["variable "+v.Name] = v.Definition
		}
	}
	return out
}

func TestGrafanaDashboardHasAPipelineVariableThatEveryQueryUses(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels; want all three", d.UID, d.Title, len(d.Panels))
	}
	hasVar := false
	for _, v := range d.Templating.List {
		if v.Name == "pipeline" && v.Type == "query" && strings.Contains(v.Definition, "pipeline") {
			hasVar = true
		}
	}
	if !hasVar {
		t.Error("dashboard has no query variable pipeline over the pipeline label")
	}
	for where, expr := range d.exprs() {
		if err := promQLBalanced(expr); err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
		}
		if strings.HasPrefix(where, "panel") && strings.Contains(expr, "shaper_") && !strings.Contains(expr, `pipeline=~"$pipeline"`) {
			t.Errorf("%s: %q does not filter by the pipeline variable", where, expr)
		}
	}
}
