package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sources"
)

// replayOutput is what a replay writes on stdout: on a terminal a live
// bar, then a summary in words; elsewhere (a pipe, a file, a container's
// log) one JSON line of progress every `every`, then a JSON summary line.
// The log stays on stderr.
type replayOutput struct {
	w        io.Writer
	terminal bool
	every    time.Duration
}

func newReplayOutput(w io.Writer, every time.Duration) *replayOutput {
	f, ok := w.(*os.File)
	return &replayOutput{w: w, terminal: ok && term.IsTerminal(int(f.Fd())), every: every}
}

// replayProgress is one progress line. Done counts the messages with a
// final outcome and those the replay passed over (--reason); Rate is the
// messages done per second over the last interval, and EtaSeconds the time
// left at that rate (absent while it is 0).
type replayProgress struct {
	Time         time.Time `json:"time"`
	Pipeline     string    `json:"pipeline"`
	Done         int64     `json:"done"`
	Total        int64     `json:"total"`
	Rate         float64   `json:"rate"`
	EtaSeconds   *float64  `json:"eta_seconds,omitempty"`
	Delivered    int64     `json:"delivered"`
	DeadLettered int64     `json:"dead_lettered"`
	Expired      int64     `json:"expired"`
	Dropped      int64     `json:"dropped"`
	Skipped      int64     `json:"skipped"`
	Unfinished   int64     `json:"unfinished"`
	InBucket     int       `json:"in_bucket"`
}

func progressOf(p *shaper.Pipeline, src sources.Replay, now time.Time) replayProgress {
	pr, st := src.Progress(), p.Status()
	return replayProgress{
		Time: now.UTC(), Pipeline: p.Name(), Done: pr.Finished + pr.Skipped, Total: pr.Total,
		Delivered: st.Outcomes[shaper.OutcomeDelivered], DeadLettered: st.Outcomes[shaper.OutcomeDeadLettered],
		Expired: st.Outcomes[shaper.OutcomeExpired], Dropped: st.Outcomes[shaper.OutcomeDropped],
		Skipped: pr.Skipped, Unfinished: pr.Unfinished, InBucket: st.Depth,
	}
}

// start reports the progress of p over src until the returned function
// is called; that function returns once the reporting has stopped.
func (o *replayOutput) start(p *shaper.Pipeline, src sources.Replay, start time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	if o.terminal {
		bar := progressbar.NewOptions64(max(src.Progress().Total, 1),
			progressbar.OptionSetWriter(o.w),
			progressbar.OptionSetDescription(p.Name()),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("msg"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetWidth(30),
		)
		draw := func() {
			pr := progressOf(p, src, time.Now())
			bar.Describe(fmt.Sprintf("%d delivered, %d dead-lettered, %d expired, %d dropped, %d skipped",
				pr.Delivered, pr.DeadLettered, pr.Expired, pr.Dropped, pr.Skipped))
			_ = bar.Set64(pr.Done)
		}
		wg.Go(func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					draw()
				case <-done:
					draw()
					_ = bar.Exit() // leaves the bar where it stopped
					fmt.Fprintln(o.w)
					return
				}
			}
		})
	} else {
		wg.Go(func() {
			tick := time.NewTicker(o.every)
			defer tick.Stop()
			last, lastAt := int64(0), start
			for {
				select {
				case now := <-tick.C:
					pr := progressOf(p, src, now)
					if d := now.Sub(lastAt).Seconds(); d > 0 {
						pr.Rate = float64(pr.Done-last) / d
					}
					if pr.Rate > 0 {
						eta := float64(pr.Total-pr.Done) / pr.Rate
						pr.EtaSeconds = &eta
					}
					last, lastAt = pr.Done, now
					o.json(map[string]replayProgress{"progress": pr})
				case <-done:
					return
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// summary writes the last line.
func (o *replayOutput) summary(s replaySummary) {
	if !o.terminal {
		o.json(map[string]replaySummary{"summary": s})
		return
	}
	state := "complete"
	switch {
	case s.Interrupted:
		state = "interrupted"
	case !s.Complete:
		state = "not complete"
	}
	fmt.Fprintf(o.w, "replay %s %s: %d in the range, %d delivered, %d dead-lettered, %d expired, %d dropped, %d skipped, %d without an outcome, in %s\n",
		s.Pipeline, state, s.Total, s.Delivered, s.DeadLettered, s.Expired, s.Dropped, s.Skipped, s.Unfinished,
		time.Duration(s.ElapsedSeconds*float64(time.Second)).Round(100*time.Millisecond))
	for _, k := range sortedKeys(s.SkippedBy) {
		fmt.Fprintf(o.w, "  skipped %s: %d\n", k, s.SkippedBy[k])
	}
	if s.Resume != "" {
		fmt.Fprintf(o.w, "to replay what is left:\n  %s\n", s.Resume)
	}
}

// dryRun writes what a range holds.
func (o *replayOutput) dryRun(where string, pr sources.ReplayProgress, to string) {
	selected := pr.Read - pr.Skipped
	if !o.terminal {
		o.json(map[string]any{"dry_run": map[string]any{
			"reads": where, "total": pr.Total, "read": pr.Read, "selected": selected, "skipped": pr.Skipped, "skipped_by": pr.SkippedBy,
			"places": pr.Places, "reasons": pr.Reasons, "to": to,
		}})
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d messages in the range (to %s); %d would be sent", where, pr.Read, to, selected)
	if pr.Skipped > 0 {
		fmt.Fprintf(&sb, ", %d passed over", pr.Skipped)
	}
	sb.WriteString("\n")
	for _, k := range sortedKeys(pr.SkippedBy) {
		fmt.Fprintf(&sb, "  skipped %-12s %d\n", k, pr.SkippedBy[k])
	}
	for _, k := range sortedKeys(pr.Places) {
		place := k
		if strings.Trim(k, "0123456789") == "" {
			place = "partition " + k
		}
		fmt.Fprintf(&sb, "  %-20s %d to send\n", place, pr.Places[k])
	}
	for _, k := range sortedKeys(pr.Reasons) {
		name := k
		if name == "" {
			name = "(no Shaper-Reason)"
		}
		fmt.Fprintf(&sb, "  reason %-13s %d\n", name, pr.Reasons[k])
	}
	fmt.Fprint(o.w, sb.String())
}

func (o *replayOutput) json(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("replay: progress does not marshal: " + err.Error()) // plain numbers and strings
	}
	fmt.Fprintf(o.w, "%s\n", b)
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j]) // partition 2 before 10
		}
		return keys[i] < keys[j]
	})
	return keys
}
