package deploy_test

// Tests of the Grafana dashboard deploy/grafana/dashboards/shaper.json.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/repotest"
)

type grafanaPanel struct {
	ID          int            `json:"id"`
	Title       string         `json:"title"`
	Type        string         `json:"type"`
	Description string         `json:"description"`
	GridPos     grafanaGridPos `json:"gridPos"`
	Panels      []grafanaPanel `json:"panels"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// grafanaGridPos is a panel's place on the dashboard's grid, 24 columns wide.
type grafanaGridPos struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// overlaps reports whether two places share a cell.
func (g grafanaGridPos) overlaps(o grafanaGridPos) bool {
	return g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H
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
	if err := json.Unmarshal(repotest.Read(t, path), &d); err != nil {
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
		if _, err := parsePromQL(expr); err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
		}
		if strings.HasPrefix(where, "panel") && strings.Contains(expr, "shaper_") && !strings.Contains(expr, `pipeline=~"$pipeline"`) {
			t.Errorf("%s: %q does not filter by the pipeline variable", where, expr)
		}
	}
}

// TestGrafanaDashboardShowsWhatEveryAlertWatches checks that each metric an
// alert rule reads is on a panel, so that whoever gets the alert can see
// what it saw. up is Prometheus's, not shaper's.
func TestGrafanaDashboardShowsWhatEveryAlertWatches(t *testing.T) {
	shown := map[string]bool{}
	for _, expr := range loadDashboard(t).exprs() {
		for _, m := range promQLMetrics(expr) {
			shown[m] = true
		}
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			metrics := promQLMetrics(r.Expr)
			if len(metrics) == 0 {
				t.Errorf("alert %s: expr %q selects no metric (or does not parse)", r.Alert, r.Expr)
			}
			for _, m := range metrics {
				if !shown[m] && m != "up" {
					t.Errorf("alert %s reads %s, which no dashboard panel shows", r.Alert, m)
				}
			}
		}
	}
}

// TestGrafanaDashboardPanelsHaveTheirOwnPlaceIDAndDescription checks the
// layout and the help texts: no two panels overlap or share an id (Grafana
// then moves or drops one), every panel fits the 24 columns, and every
// graph says what it shows in its own words (a description copied from
// another panel explains the wrong thing).
func TestGrafanaDashboardPanelsHaveTheirOwnPlaceIDAndDescription(t *testing.T) {
	d := loadDashboard(t)
	ids := map[int]string{}
	descriptions := map[string]string{}
	var placed []grafanaPanel
	for _, p := range d.Panels {
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24 columns", p.Title, g)
		}
		for _, q := range placed {
			if g.overlaps(q.GridPos) {
				t.Errorf("panels %q %+v and %q %+v overlap", p.Title, g, q.Title, q.GridPos)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("panel %q has no description", p.Title)
		} else if other, dup := descriptions[p.Description]; dup {
			t.Errorf("panels %q and %q have the same description", other, p.Title)
		}
		descriptions[p.Description] = p.Title
	}
}

// TestDeployREADMENamesPanelsTheDashboardHas checks that the panels the
// deploy guide tells people to look at are on the dashboard under those
// titles: a renamed panel leaves the guide pointing at nothing.
func TestDeployREADMENamesPanelsTheDashboardHas(t *testing.T) {
	guide := string(repotest.Read(t, filepath.Join(deployDir, "README.md")))
	start := strings.Index(guide, "What to look at on the dashboard")
	end := strings.Index(guide, "Things to try")
	if start < 0 || end < start {
		t.Fatal(`deploy/README.md: no "What to look at on the dashboard" section before "Things to try"`)
	}
	titles := map[string]bool{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			titles[p.Title] = true
			walk(p.Panels)
		}
	}
	walk(loadDashboard(t).Panels)
	named := regexp.MustCompile(`(?s)\*\*([^*`+"`"+`]+)\*\*`).FindAllStringSubmatch(guide[start:end], -1)
	if len(named) == 0 {
		t.Fatal("deploy/README.md names no panel in bold")
	}
	for _, m := range named {
		if title := strings.Join(strings.Fields(m[1]), " "); !titles[title] {
			t.Errorf("deploy/README.md points at panel %q, which the dashboard does not have", title)
		}
	}
}
