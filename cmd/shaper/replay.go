package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/fleet"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sources"
)

// replayLookupTimeout bounds how long a replay waits for its broker to say
// what its range holds before it gives up.
const replayLookupTimeout = 30 * time.Second

// replayArgs are the command line of shaper replay.
type replayArgs struct {
	config, pipeline string
	from, to         string
	rate             float64
	rateGiven        bool // --rate was given: then it must be > 0
	deadLetters      bool
	reason           string
	dryRun           bool
	progressEvery    time.Duration
}

// replayCmd runs one pipeline of a config over a bounded range of its
// source (or of its dead letters), and exits 0 once every message in the
// range has a final outcome (docs/replay.md). The first SIGINT/SIGTERM drains
// the bucket as run does, the second stops at once; either way it prints
// the command that replays what is left.
func replayCmd(ctx context.Context, args []string, g *globals, stdout, stderr io.Writer) error {
	var a replayArgs
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.StringVar(&a.config, "config", "", "config file (required)")
	fs.StringVar(&a.pipeline, "pipeline", "", "the pipeline to replay (required)")
	fs.StringVar(&a.from, "from", "", "first message: RFC 3339 time, offset:N, offset:P=N,P=N or seq:N (default: the start of the log)")
	fs.StringVar(&a.to, "to", "", "first message past the range, same forms (default: the end of the log when the replay starts)")
	fs.Float64Var(&a.rate, "rate", 0, "requests per second, instead of rate.limit (then on this process alone, not rate.shared)")
	fs.BoolVar(&a.deadLetters, "dead-letters", false, "replay the pipeline's dead_letter target instead of its source")
	fs.StringVar(&a.reason, "reason", "", "with dead letters: only those of this Shaper-Reason (expired, rejected, exhausted, malformed)")
	fs.BoolVar(&a.dryRun, "dry-run", false, "count what the range holds, per partition and per reason, and send nothing")
	fs.DurationVar(&a.progressEvery, "progress-every", 5*time.Second, "how often a progress line is written when stdout is not a terminal")
	if err := parseFlags(fs, args, g, stderr); err != nil {
		return err
	}
	a.rateGiven = g.given["rate"]
	log, err := g.logger(stderr)
	if err != nil {
		return err
	}
	cfg, pc, opts, err := a.check(time.Now())
	if err != nil {
		return err
	}
	knobs, err := useTuning(cfg, log)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, replayLookupTimeout)
	src, where, err := buildReplaySource(lctx, pc, opts, log.With("pipeline", pc.Name))
	cancel()
	if err != nil {
		var bound *sources.BoundError
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("replay: interrupted before it started: %w", err)
		case errors.As(err, &bound):
			return fmt.Errorf("%w: replay: %v", errUsage, err)
		}
		return fmt.Errorf("replay: %w", err)
	}
	out := newReplayOutput(stdout, a.progressEvery)
	if a.dryRun {
		return dryRun(ctx, src, where, out)
	}
	parts, err := buildDelivery(pc, knobs, log)
	if err != nil {
		parts.Source = src
		_ = parts.Close(context.Background())
		return fmt.Errorf("replay: pipeline %q: %w", pc.Name, err)
	}
	parts.Source = src
	parts.Metrics = shaper.NewMetrics(prometheus.NewRegistry())
	parts.Logger = log
	parts.DrainTimeout = cfg.Shutdown.DrainTimeout
	parts.Clock = fleet.NewClock(knobs)
	p := shaper.New(pc.Core(), parts)
	log.Info("replay starting", "pipeline", pc.Name, "from", where, "total", src.Progress().Total, "limit", pc.Rate.Limit)
	knobs.NewProcs(log).Set(pc.Rate.Limit)
	defer knobs.StartHeapFloor()()
	return replay(ctx, p, src, a, out, log)
}

// check reads the config and the flags, and returns the pipeline to
// replay, as the replay runs it (--rate in force), and what its source
// reads; every problem is a usage error. now bounds the times --from and
// --to may name.
func (a replayArgs) check(now time.Time) (*config.File, config.Pipeline, sources.ReplayOptions, error) {
	var opts sources.ReplayOptions
	cfg, pc, err := a.loadPipeline()
	if err != nil {
		return nil, pc, opts, err
	}
	var problems []string
	opts.From, opts.To, problems = a.readBounds(now)
	opts.Pipeline = pc.Name
	opts.DeadLetters = a.deadLetters || pc.Source.Kafka != nil && pc.Source.Kafka.DeadLetters || pc.Source.NATS != nil && pc.Source.NATS.DeadLetters
	problems = append(problems, a.checkRange(pc, opts)...)
	switch a.reason {
	case "":
	case string(shaper.ReasonExpired), string(shaper.ReasonRejected), string(shaper.ReasonExhausted), string(shaper.ReasonMalformed):
		if !opts.DeadLetters {
			problems = append(problems, "--reason selects dead letters: it needs --dead-letters (or a source with dead_letters: true)")
		}
		opts.Reason = a.reason
	default:
		problems = append(problems, fmt.Sprintf("--reason: want expired, rejected, exhausted or malformed, got %q", a.reason))
	}
	if a.progressEvery <= 0 {
		problems = append(problems, fmt.Sprintf("--progress-every: must be > 0, got %s", a.progressEvery))
	}
	problems = append(problems, a.applyRate(&pc)...)
	if len(problems) > 0 {
		return nil, pc, opts, fmt.Errorf("%w: replay:\n  %s", errUsage, strings.Join(problems, "\n  "))
	}
	return cfg, pc, opts, nil
}

// loadPipeline loads --config and returns it with the pipeline --pipeline
// names in it.
func (a replayArgs) loadPipeline() (*config.File, config.Pipeline, error) {
	switch {
	case a.config == "":
		return nil, config.Pipeline{}, fmt.Errorf("%w: replay: --config is required", errUsage)
	case a.pipeline == "":
		return nil, config.Pipeline{}, fmt.Errorf("%w: replay: --pipeline is required", errUsage)
	}
	cfg, err := config.Load(a.config)
	if err != nil {
		return nil, config.Pipeline{}, fmt.Errorf("%w: %s:\n%v", errUsage, a.config, err)
	}
	i := -1
	var names []string
	for j, p := range cfg.Pipelines {
		names = append(names, p.Name)
		if p.Name == a.pipeline {
			i = j
		}
	}
	if i < 0 {
		return nil, config.Pipeline{}, fmt.Errorf("%w: replay: --pipeline %q: no such pipeline in %s (it has %s)", errUsage, a.pipeline, a.config, strings.Join(names, ", "))
	}
	return cfg, cfg.Pipelines[i], nil
}

// readBounds reads --from and --to, and says what is wrong with each: not
// a bound, or a time no message can have been stored at (see
// sources.Bound.CheckTime).
func (a replayArgs) readBounds(now time.Time) (from, to sources.Bound, problems []string) {
	var err error
	if from, err = sources.ParseBound(a.from); err != nil {
		problems = append(problems, "--from "+err.Error())
	} else if err := from.CheckTime(now); err != nil {
		problems = append(problems, "--from: "+err.Error())
	}
	if to, err = sources.ParseBound(a.to); err != nil {
		problems = append(problems, "--to "+err.Error())
	} else if err := to.CheckTime(now); err != nil {
		problems = append(problems, "--to: "+err.Error())
	}
	return from, to, problems
}

// checkRange says what is wrong with reading opts' range from the log the
// replay reads (the pipeline's source, or its dead_letter target with
// --dead-letters): no such target, a core NATS source that keeps no log,
// a bound of the other broker's kind (seq:N for Kafka, offset:N for
// JetStream), or --to not after --from.
func (a replayArgs) checkRange(pc config.Pipeline, opts sources.ReplayOptions) []string {
	var problems []string
	kafka := pc.Source.Kafka != nil
	if a.deadLetters {
		switch dl := pc.DeadLetter; {
		case dl == nil:
			problems = append(problems, fmt.Sprintf("--dead-letters: pipeline %q has no dead_letter target", pc.Name))
		default:
			kafka = dl.Kafka != nil
		}
	} else if n := pc.Source.NATS; n != nil && n.Stream == "" {
		problems = append(problems, fmt.Sprintf("pipeline %q reads core NATS (no source.nats.stream), which keeps no log to replay", pc.Name))
	}
	for _, b := range []struct {
		flag string
		b    sources.Bound
	}{{"--from", opts.From}, {"--to", opts.To}} {
		switch {
		case kafka && b.b.Kind == sources.BoundSeq:
			problems = append(problems, b.flag+": seq:N is for JetStream; this replay reads Kafka: use offset:N or a time")
		case !kafka && b.b.Kind == sources.BoundOffset:
			problems = append(problems, b.flag+": offset:N is for Kafka; this replay reads JetStream: use seq:N or a time")
		}
	}
	if opts.From.Kind == sources.BoundTime && opts.To.Kind == sources.BoundTime && !opts.To.Time.After(opts.From.Time) {
		problems = append(problems, fmt.Sprintf("--to %s is not after --from %s", a.to, a.from))
	}
	return problems
}

// applyRate puts --rate, when given, in place of the pipeline's
// rate.limit, and says what is wrong with it.
func (a replayArgs) applyRate(pc *config.Pipeline) []string {
	if a.rateGiven && !(a.rate > 0) {
		return []string{fmt.Sprintf("--rate: must be > 0, got %v (leave it out for rate.limit, %v)", a.rate, pc.Rate.Limit)}
	}
	if a.rate != 0 {
		pc.Rate.Limit = a.rate
		pc.Rate.Shared = nil // the operator's rate, on this process: not a share of the live one
		if err := pc.Validate("--rate"); err != nil {
			return []string{err.Error()}
		}
	}
	return nil
}

// buildReplaySource returns the range the replay reads: the pipeline's
// source or, with dead letters, its dead-letter target; and says which,
// for the log.
func buildReplaySource(ctx context.Context, pc config.Pipeline, opts sources.ReplayOptions, log *slog.Logger) (sources.Replay, string, error) {
	name := "shaper-replay-" + pc.Name
	capacity := pc.Bucket.Capacity
	readDL := opts.DeadLetters && pc.DeadLetter != nil && !(pc.Source.Kafka != nil && pc.Source.Kafka.DeadLetters || pc.Source.NATS != nil && pc.Source.NATS.DeadLetters)
	switch {
	case readDL && pc.DeadLetter.Kafka != nil:
		k := pc.DeadLetter.Kafka
		r, err := sources.NewKafkaRange(ctx, k.Config, k.Topic, capacity, opts, name, log)
		return r, "dead_letter.kafka topic " + k.Topic, err
	case readDL:
		n := pc.DeadLetter.NATS
		r, err := sources.NewJetStreamRange(ctx, n.URL, "", n.Subject, capacity, opts, name, log)
		return r, "dead_letter.nats subject " + n.Subject, err
	case pc.Source.Kafka != nil:
		k := pc.Source.Kafka
		r, err := sources.NewKafkaRange(ctx, k.Config, k.Topic, capacity, opts, name, log)
		return r, "source.kafka topic " + k.Topic, err
	default:
		n := pc.Source.NATS
		r, err := sources.NewJetStreamRange(ctx, n.URL, n.Stream, n.Subject, capacity, opts, name, log)
		return r, "source.nats stream " + n.Stream, err
	}
}

// replay runs p over src until the range is finished, or a signal drains
// it, and reports how it went.
func replay(ctx context.Context, p *shaper.Pipeline, src sources.Replay, a replayArgs, out *replayOutput, log *slog.Logger) error {
	force, stopForce := forceOnSecondSignal(ctx, log)
	defer stopForce()
	go func() {
		select {
		case <-ctx.Done(): // the first signal: forceOnSecondSignal logs it
			p.Drain()
		case <-force.Done():
		}
	}()
	start := time.Now()
	report := out.start(p, src, start)
	runErr := p.Run(force)
	forced := force.Err() != nil // SIGQUIT, or a second signal
	stopForce()
	report()

	pr := src.Progress()
	st := p.Status()
	s := replaySummary{
		Pipeline: p.Name(), Total: pr.Total, Read: pr.Read, Skipped: pr.Skipped, SkippedBy: pr.SkippedBy, Unfinished: pr.Unfinished,
		Delivered: st.Outcomes[shaper.OutcomeDelivered], DeadLettered: st.Outcomes[shaper.OutcomeDeadLettered],
		Expired: st.Outcomes[shaper.OutcomeExpired], Dropped: st.Outcomes[shaper.OutcomeDropped],
		ElapsedSeconds: time.Since(start).Seconds(),
		Interrupted:    ctx.Err() != nil || forced,
	}
	s.Complete = runErr == nil && !s.Interrupted && pr.Exhausted && pr.Unfinished == 0 && pr.Finished+pr.Skipped == pr.Read
	if !s.Complete {
		from, to := src.Resume()
		s.Resume = a.resumeCommand(from, to)
	}
	out.summary(s)
	switch {
	case runErr != nil:
		return fmt.Errorf("replay: %w", runErr)
	case s.Interrupted:
		return fmt.Errorf("replay interrupted; %d of %d messages are not finished; to go on: %s", pr.Total-pr.Finished-pr.Skipped, pr.Total, s.Resume)
	case !s.Complete:
		return fmt.Errorf("replay: %d messages got no final outcome (no dead_letter target, or it failed; see the log); to replay them: %s", pr.Unfinished, s.Resume)
	}
	return nil
}

// replaySummary is the last line of a replay.
type replaySummary struct {
	Pipeline     string `json:"pipeline"`
	Total        int64  `json:"total"`
	Read         int64  `json:"read"`
	Delivered    int64  `json:"delivered"`
	DeadLettered int64  `json:"dead_lettered"`
	Expired      int64  `json:"expired"`
	Dropped      int64  `json:"dropped"`
	Skipped      int64  `json:"skipped"`
	// SkippedBy counts the skipped by why: other_pipeline, other_reason,
	// payload_omitted.
	SkippedBy      map[string]int64 `json:"skipped_by,omitempty"`
	Unfinished     int64            `json:"unfinished"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	Complete       bool             `json:"complete"`
	Interrupted    bool             `json:"interrupted,omitempty"`
	Resume         string           `json:"resume,omitempty"`
}

// resumeCommand is the shaper replay command line that replays [from, to)
// with a's other flags.
func (a replayArgs) resumeCommand(from, to string) string {
	args := []string{"shaper", "replay", "--config", a.config, "--pipeline", a.pipeline, "--from", from, "--to", to}
	if a.rate != 0 {
		args = append(args, "--rate", strconv.FormatFloat(a.rate, 'g', -1, 64))
	}
	if a.deadLetters {
		args = append(args, "--dead-letters")
	}
	if a.reason != "" {
		args = append(args, "--reason", a.reason)
	}
	for i, s := range args {
		args[i] = shellQuote(s)
	}
	return strings.Join(args, " ")
}

// shellQuote returns s as one word for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// dryRun reads the whole range, sending nothing, and prints what it holds.
func dryRun(ctx context.Context, src sources.Replay, where string, out *replayOutput) error {
	defer func() { _ = src.Close(context.WithoutCancel(ctx)) }()
	for {
		msgs, err := src.Fetch(ctx, 1000)
		for _, m := range msgs {
			_ = m.Receipt.Ack(ctx)
		}
		switch {
		case errors.Is(err, io.EOF):
			_, to := src.Resume()
			out.dryRun(where, src.Progress(), to)
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("replay --dry-run: interrupted after %d messages", src.Progress().Read)
		case err != nil:
			return fmt.Errorf("replay --dry-run: %w", err)
		}
	}
}
