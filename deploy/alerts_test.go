package deploy_test

// Tests of the Prometheus alert rules deploy/prometheus/alerts.yml.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shaper-dev/shaper/internal/repotest"
)

type alertRuleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertRuleFile {
	t.Helper()
	var f alertRuleFile
	path := filepath.Join(deployDir, "prometheus", "alerts.yml")
	dec := yaml.NewDecoder(strings.NewReader(string(repotest.Read(t, path))))
	dec.KnownFields(true) // a misspelt key (anotations:) is an error, as in Prometheus
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

func TestAlertRulesAreWellFormed(t *testing.T) {
	f := loadAlerts(t)
	if len(f.Groups) == 0 {
		t.Fatal("alerts.yml has no groups")
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d (%s)", g.Name, i, r.Alert)
			if r.Alert == "" {
				t.Errorf("%s: no alert name", where)
			}
			if names[r.Alert] {
				t.Errorf("%s: duplicate alert name", where)
			}
			names[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			} else if _, err := parsePromQL(r.Expr); err != nil {
				t.Errorf("%s: expr %q: %v", where, r.Expr, err)
			}
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q; want a positive duration", where, r.For)
			}
			if sev := r.Labels["severity"]; sev != "info" && sev != "warning" && sev != "critical" {
				t.Errorf("%s: labels.severity %q; want info, warning or critical", where, sev)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no annotations.%s", where, a)
				}
			}
		}
	}
	for _, want := range []string{"ShaperQueueWaitNearMaxQueueTime", "ShaperDeadLettersRising", "ShaperLimiterFallback", "ShaperSinkErrorRatioHigh",
		"ShaperConsumerLagGrowing", "ShaperBreakerOpen", "ShaperThrottledMostOfTheTime", "ShaperPausedForAnHour", "ShaperKeyOverflow"} {
		if !names[want] {
			t.Errorf("alerts.yml lacks %s", want)
		}
	}
}

// TestAlertQueueWaitComparesWithTheExportedMaxQueueTime checks that the
// queue-wait alert and panel read each pipeline's max_queue_time from
// shaper_max_queue_time_seconds instead of a number that could drift from
// the configs.
func TestAlertQueueWaitComparesWithTheExportedMaxQueueTime(t *testing.T) {
	const want = "0.8 * max by (pipeline) (shaper_max_queue_time_seconds)"
	found := false
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "ShaperQueueWaitNearMaxQueueTime" {
				found = true
				if !strings.Contains(r.Expr, want) {
					t.Errorf("ShaperQueueWaitNearMaxQueueTime expr %q; want it to compare with %q", r.Expr, want)
				}
			}
		}
	}
	if !found {
		t.Fatal("no ShaperQueueWaitNearMaxQueueTime alert")
	}
}
