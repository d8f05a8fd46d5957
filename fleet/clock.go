package fleet

import (
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/shaper"
)

// NewClock returns the clock for the pipelines of one process: the
// machine's clock whose alarms are tuning's precise ones when the clock
// knob is in k (docs/tuning.md), one set for all of them so that together
// they keep a P free for the rest; else the machine's clock on Go timers.
func NewClock(k tuning.Knobs) shaper.Clock {
	if a := k.NewAlarms(); a != nil {
		return preciseClock{alarms: a}
	}
	return shaper.SystemClock{}
}

// preciseClock is shaper.SystemClock with tuning's alarms.
type preciseClock struct {
	shaper.SystemClock
	alarms *tuning.Alarms
}

func (c preciseClock) NewAlarm() shaper.Alarm { return c.alarms.NewAlarm() }
