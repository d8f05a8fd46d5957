// Command bench is shaper's benchmark harness: `go run ./bench` (what
// `make bench` runs) measures, side by side in one run, the shaping
// precision of the real pipeline beside two baselines, the overhead of the
// limiter and of a running daemon, the throughput ceiling, memory under a
// large backlog, the Redis-shared limiter, how the rate follows a sink
// that pushes back, what keys cost (lanes) and what per-message
// destinations cost (url_from to many hosts), and what shaper costs beside
// the loop a user would write instead and Benthos (peers), and writes
// docs/benchmarks.md, docs/benchmarks.json, docs/shaping.svg and
// docs/pushback.svg.
//
// It reports against the project's goals and never fails on a missed one:
// the figures are for people to read. It needs the Go toolchain (it builds
// cmd/shaper for the child processes and runs `go test -bench`) and
// redis-server; brokers are embedded (nats-server, kfake).
//
// Run it on a quiet machine: every figure is measured on the same cores as
// the brokers and the sink, and each section's table says how much CPU
// other processes took meanwhile.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the harness's flags and where it works.
type options struct {
	out        string
	only       map[string]bool
	quick      bool
	cpuprofile string
	shaper     string          // a prebuilt shaper binary for the children, instead of building ./cmd/shaper
	peerCases  map[string]bool // the peers cases to run; empty: all
	root       string          // the module's root directory
	tmp        string          // configs, logs and the shaper binary of this run
}

var sections = []string{"precision", "overhead", "throughput", "scale", "picture", "pushback", "lanes", "destinations", "peers", "tuning"}

func realMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.out, "out", "docs", "directory for benchmarks.md, benchmarks.json, shaping.svg, pushback.svg and lanes.svg, relative to the module root")
	only := fs.String("only", "", "comma-separated sections to run (default all): "+strings.Join(sections, ", "))
	fs.BoolVar(&o.quick, "quick", false, "short runs, to check the harness itself; the figures are not for publishing")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the harness process (the in-process pipelines of precision, picture and pushback, the brokers, the sinks) to this file")
	fs.StringVar(&o.shaper, "shaper", "", "use this shaper binary for the `shaper run` children instead of building ./cmd/shaper")
	peerCases := fs.String("peer-cases", "", "with peers: comma-separated cases to run (default all): jetstream-1000, jetstream-100, kafka-1000, core-1000, jetstream-5000")
	render := fs.String("render", "", "measure nothing: write benchmarks.md and the pictures again from this benchmarks.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.only = map[string]bool{}
	for s := range strings.SplitSeq(*only, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(sections, s) {
			return fmt.Errorf("-only: unknown section %q (want %s)", s, strings.Join(sections, ", "))
		}
		o.only[s] = true
	}
	o.peerCases = map[string]bool{}
	for c := range strings.SplitSeq(*peerCases, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.peerCases[c] = true
		}
	}
	var err error
	if o.root, err = moduleRoot(); err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(o.root, o.out)
	}
	if *render != "" {
		return rerender(*render, o.out)
	}
	if o.tmp, err = os.MkdirTemp("", "shaper-bench-"); err != nil {
		return err
	}
	defer os.RemoveAll(o.tmp)
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	start := time.Now()
	rep := &Report{
		Command: commandLine(args),
		Date:    start.UTC().Format("2006-01-02 15:04 MST"),
		Machine: describeMachine(o.root),
		Quick:   o.quick,
	}
	progress("%s on %s (%d cores), %s", rep.Command, rep.Machine.CPU, rep.Machine.Cores, rep.Machine.Go)
	env, err := setup(ctx, o)
	if err != nil {
		return err
	}
	defer env.close()

	run := func(name string, f func() error) error {
		if len(o.only) > 0 && !o.only[name] {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.Now()
		progress("== %s", name)
		err := f()
		progress("== %s took %.0fs", name, time.Since(t).Seconds())
		return err
	}
	// A section that fails is left out and named in the report; the others
	// still run, and the harness exits 1 after writing what it measured.
	err = errors.Join(
		run("precision", func() (err error) { rep.Precision, err = runPrecision(ctx, o, env.js); return }),
		run("overhead", func() (err error) { rep.Overhead, err = runOverhead(ctx, o, env); return }),
		run("throughput", func() (err error) { rep.Throughput, err = runThroughput(ctx, o, env); return }),
		run("scale", func() (err error) { rep.Scale, err = runScale(ctx, o, env); return }),
		run("picture", func() (err error) { rep.Picture, err = runPicture(ctx, o, env); return }),
		run("pushback", func() (err error) { rep.Pushback, err = runPushback(ctx, o, env); return }),
		run("lanes", func() (err error) { rep.Lanes, err = runLanes(ctx, o, env); return }),
		run("destinations", func() (err error) { rep.Destinations, err = runDestinations(ctx, o, env); return }),
		run("peers", func() (err error) { rep.Peers, err = runPeers(ctx, o, env); return }),
		run("tuning", func() (err error) { rep.Tuning, err = runTuning(ctx, o, env); return }),
	)
	if ctx.Err() != nil {
		return ctx.Err() // interrupted: nothing worth writing
	}
	if rep.Pushback != nil {
		rep.Pushback.MeasuredBy = Provenance{Command: rep.Command, Date: rep.Date, Commit: rep.Machine.Commit}
	}
	if rep.Lanes != nil {
		rep.Lanes.MeasuredBy = Provenance{Command: rep.Command, Date: rep.Date, Commit: rep.Machine.Commit}
	}
	if rep.Destinations != nil {
		rep.Destinations.MeasuredBy = Provenance{Command: rep.Command, Date: rep.Date, Commit: rep.Machine.Commit}
	}
	if rep.Peers != nil {
		rep.Peers.MeasuredBy = Provenance{Command: rep.Command, Date: rep.Date, Commit: rep.Machine.Commit}
	}
	if rep.Tuning != nil {
		rep.Tuning.MeasuredBy = Provenance{Command: rep.Command, Date: rep.Date, Commit: rep.Machine.Commit}
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Machine.LoadEnd = loadAverage()
	rep.Goals = evaluateGoals(rep)
	if err != nil {
		rep.Failures = strings.Split(err.Error(), "\n")
	}
	if werr := rep.write(o.out); werr != nil {
		return errors.Join(err, werr)
	}
	progress("wrote %s in %.0fs", strings.Join(rep.written, ", "), rep.Seconds)
	return err
}

// environment is what several sections share: the shaper binary and the
// embedded brokers.
type environment struct {
	bin   string
	js    *jetStream
	kafka *kafkaCluster
}

// Kafka topics of the run, created with the cluster.
const (
	topicSteady      = "steady"
	topicIdle        = "idle"
	topicThroughput  = "through"
	topicBacklog100k = "backlog100k"
	topicBacklog1M   = "backlog1m"
)

func setup(ctx context.Context, o *options) (_ *environment, err error) {
	env := &environment{}
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	if env.bin = o.shaper; env.bin == "" {
		progress("building cmd/shaper")
		if env.bin, err = shaperBinary(ctx, o.root, o.tmp); err != nil {
			return nil, err
		}
	}
	if env.js, err = startJetStream(); err != nil {
		return nil, err
	}
	if env.kafka, err = startKafka(topicSteady, topicIdle, topicThroughput, topicBacklog100k, topicBacklog1M,
		topicLanesOne, topicLanesMany, topicLanesBacklog,
		topicDestinations, topicDestinationOne, topicDestinationURL); err != nil {
		return nil, err
	}
	need := func(s string) bool { return len(o.only) == 0 || o.only[s] }
	if need("overhead") {
		if err := env.kafka.publish(ctx, topicSteady, 0, 20_000); err != nil {
			return nil, err
		}
	}
	if need("throughput") {
		progress("publishing %d messages to Kafka", throughputBacklog)
		if err := env.kafka.publish(ctx, topicThroughput, 0, throughputBacklog); err != nil {
			return nil, err
		}
	}
	return env, nil
}

func (e *environment) close() {
	if e.kafka != nil {
		e.kafka.close()
	}
	if e.js != nil {
		e.js.close()
	}
}

// rerender writes the markdown and the pictures again from a report's JSON,
// measuring nothing: for changes to how figures are shown.
func rerender(path, out string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	rep.Goals = evaluateGoals(&rep)
	if err := rep.write(out); err != nil {
		return err
	}
	progress("wrote %s from %s", strings.Join(rep.written, ", "), path)
	return nil
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or above it: run from the shaper module")
		}
		dir = parent
	}
}

func commandLine(args []string) string {
	return strings.TrimSpace("go run ./bench " + strings.Join(args, " "))
}

// progress writes one line of progress to stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
