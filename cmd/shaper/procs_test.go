package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/tuning"
)

// A real daemon runs its Go code on one P while its pipelines' limits sum
// to at most tuning.OneProcRate, and on the runtime's default above: as started,
// after a rate set through the admin API, and after a reload. GOMAXPROCS in
// the environment wins over all of it; with tuning off (in the config or
// in SHAPER_TUNING) GOMAXPROCS stays the runtime's default.
func TestGOMAXPROCSFollowsThePipelinesTotalRateUnlessTuningIsOff(t *testing.T) {
	const token = "procs-test-token-0123456789"
	natsURL := startJetStream(t, 0)
	sink := sinktest.Start(t, sinktest.OK)
	configText := func(limit int) string {
		return strings.Replace(runConfig(natsURL, sink.URL, limit, 0),
			`admin: {listen: "127.0.0.1:0"}`, `admin: {listen: "127.0.0.1:0", token: "`+token+`"}`, 1)
	}
	procsOf := func(c *childtest.Process, want float64, when string) {
		t.Helper()
		c.WaitMetrics(20*time.Second, fmt.Sprintf("go_sched_gomaxprocs_threads %v %s", want, when), func(m childtest.Metrics) bool {
			return m.Sum("go_sched_gomaxprocs_threads") == want
		})
	}

	above := tuning.OneProcRate * 2
	config := childtest.WriteConfig(t, configText(above))
	c := startShaper(t, []string{"GOMAXPROCS="}, "run", "--config", config)
	var byDefault float64
	c.WaitMetrics(20*time.Second, "go_sched_gomaxprocs_threads", func(m childtest.Metrics) bool {
		byDefault = m.Sum("go_sched_gomaxprocs_threads")
		return byDefault >= 1
	})
	t.Logf("the runtime's default here: GOMAXPROCS %v", byDefault)

	putRate(t, c.Admin(), token, tuning.OneProcRate)
	procsOf(c, 1, "after PUT rate "+fmt.Sprint(tuning.OneProcRate))
	putRate(t, c.Admin(), token, above)
	procsOf(c, byDefault, "after PUT rate "+fmt.Sprint(above))
	reload(t, c, config, configText(100), "GOMAXPROCS set for the pipelines' total rate\" gomaxprocs=1 total_limit=100")
	procsOf(c, 1, "after a reload to 100/s")
	c.Stop()

	fixed := startShaper(t, []string{"GOMAXPROCS=3"}, "run", "--config", childtest.WriteConfig(t, configText(100)))
	procsOf(fixed, 3, "with GOMAXPROCS=3 in the environment at 100/s")
	fixed.Stop()

	for _, off := range []struct {
		env    []string
		config string
	}{
		{[]string{"GOMAXPROCS=", tuning.EnvVar + "=off"}, configText(100)},
		{[]string{"GOMAXPROCS="}, "tuning: off\n" + configText(100)},
		{[]string{"GOMAXPROCS=", tuning.EnvVar + "=off:procs"}, "tuning: on\n" + configText(100)},
	} {
		c := startShaper(t, off.env, "run", "--config", childtest.WriteConfig(t, off.config))
		// The admin server serves once GOMAXPROCS is set for the rate.
		procsOf(c, byDefault, fmt.Sprintf("at 100/s with %v and %.12q", off.env, off.config))
		c.Stop()
	}
}
