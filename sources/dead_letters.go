package sources

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/shaper-dev/shaper/shaper"
)

// otherPipelines passes over, counts and logs the records of a live
// dead-letter source (dead_letters: true) that are not its pipeline's own
// (see OwnDeadLetter): two pipelines may share a dead-letter topic or
// subject, and a dead letter goes back only to the receiver of the
// pipeline that wrote it.
type otherPipelines struct {
	pipeline string
	log      *slog.Logger
	skipped  atomic.Int64
}

// checkPipeline returns an error when a source reads dead letters
// (deadLetters) for no pipeline: it could tell none of them its own.
func checkPipeline(deadLetters bool, pipeline string) error {
	if deadLetters && pipeline == "" {
		return errors.New("dead_letters: the pipeline's name is required (Pipeline), to take only its own dead letters")
	}
	return nil
}

// own reports whether m, a record read before AsDeadLetter, is the
// pipeline's own dead letter. When it is not, the caller settles it as
// finished and hands it out to nobody; own counts it and logs it with
// what identifies it (record: the record's id).
func (o *otherPipelines) own(m *shaper.Message) bool {
	if OwnDeadLetter(m, o.pipeline) {
		return true
	}
	n := o.skipped.Add(1)
	o.log.Warn("dead letter of another pipeline passed over: it goes back only through the pipeline named in its Shaper-Pipeline",
		"skipped", SkipOtherPipeline, "shaper_pipeline", headerValue(m.Header, "Shaper-Pipeline"),
		"record", m.ID, "shaper_source", headerValue(m.Header, "Shaper-Source"), "other_pipeline_total", n)
	return false
}
