// Command bench is shaper's benchmark harness: `go run ./bench` (what
// `make bench` runs) measures, side by side in one run, the shaping
// precision of the real pipeline beside two baselines, the overhead of the
// limiter and of a running daemon, the throughput ceiling, memory under a
// large backlog, one rate shared by replicas through Redis (fleet), how
// the rate follows a sink that pushes back, what keys cost (lanes) and what
// per-message destinations cost (url_from to many hosts), and what shaper
// costs beside the loop a user would write instead and Benthos (peers), and
// writes docs/benchmarks.md, docs/benchmarks.json and the pictures.
//
// Every section runs on one runner (runner.go): it starts the brokers,
// publishes, runs in-process pipelines or `shaper run` children on a
// small spec, and measures what reached the sinks. It reports against the
// project's goals and never fails on a missed one: the figures are for
// people to read. It needs the Go toolchain (it builds cmd/shaper and runs
// `go test -bench`) and redis-server; brokers are embedded.
//
// Run it on a quiet machine: every figure is measured on the same cores as
// the brokers and the sink, and each section says how much CPU other
// processes took meanwhile.
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
	fleetCases map[string]bool // the fleet runs to make; empty: all
	root       string          // the module's root directory
	tmp        string          // configs, logs and the shaper binary of this run
}

func realMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.out, "out", "docs", "directory for benchmarks.md, benchmarks.json and the pictures, relative to the module root")
	only := fs.String("only", "", "comma-separated sections to run (default all): "+strings.Join(sectionNames(), ", "))
	fs.BoolVar(&o.quick, "quick", false, "short runs, to check the harness itself; the figures are not for publishing")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the harness process (the in-process pipelines, the brokers, the sinks) to this file")
	fs.StringVar(&o.shaper, "shaper", "", "use this shaper binary for the `shaper run` children instead of building ./cmd/shaper")
	peerCases := fs.String("peer-cases", "", "with peers: comma-separated cases to run (default all): jetstream-1000, jetstream-100, kafka-1000, core-1000, jetstream-5000, jetstream-https-1000, jetstream-https-100")
	fleetCases := fs.String("fleet-cases", "", "with fleet: comma-separated runs to make (default all), named replicas x limit, -stalled for the stall pattern: 3x1000, 3x1000-stalled, ...")
	render := fs.String("render", "", "measure nothing: write benchmarks.md and the pictures again from this benchmarks.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.only, o.peerCases, o.fleetCases = set(*only), set(*peerCases), set(*fleetCases)
	for s := range o.only {
		if !slices.Contains(sectionNames(), s) {
			return fmt.Errorf("-only: unknown section %q (want %s)", s, strings.Join(sectionNames(), ", "))
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
	rep := &Report{Command: commandLine(args), Date: start.UTC().Format("2006-01-02 15:04 MST"), Machine: describeMachine(), Quick: o.quick}
	progress("%s on %s (%d cores), %s", rep.Command, rep.Machine.CPU, rep.Machine.Cores, rep.Machine.Go)
	b, err := startBench(ctx, o)
	if err != nil {
		return err
	}
	defer b.close()
	// A section that fails is left out and named in the report; the others
	// still run, and the harness exits 1 after writing what it measured.
	var errs []error
	for _, e := range rep.sections() {
		if len(o.only) > 0 && !o.only[e.name] || ctx.Err() != nil {
			continue
		}
		t, probe := time.Now(), startLoadProbe()
		progress("== %s", e.name)
		s, err := e.run(ctx, b)
		progress("== %s took %.0fs", e.name, time.Since(t).Seconds())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.name, err))
			continue
		}
		*s.common() = Common{Load: probe.stop(), MeasuredBy: &Provenance{Command: rep.Command, Date: rep.Date}}
	}
	if ctx.Err() != nil {
		return ctx.Err() // interrupted: nothing worth writing
	}
	err = errors.Join(errs...)
	rep.Seconds = time.Since(start).Seconds()
	rep.Machine.LoadEnd = loadAverage()
	if err != nil {
		rep.Failures = strings.Split(err.Error(), "\n")
	}
	if werr := rep.write(o.out); werr != nil {
		return errors.Join(err, werr)
	}
	progress("wrote %s in %.0fs", strings.Join(rep.written, ", "), rep.Seconds)
	return err
}

// entry is one section of the harness: its name for -only, how it is
// measured, and its figures in the report (nil when not measured).
type entry struct {
	name string
	run  func(context.Context, *bench) (section, error)
	got  func() section
}

// sections are every section, in the order they run and appear on the
// page, each with its place in r: adding a section is a field of Report
// and a line here.
func (r *Report) sections() []entry {
	return []entry{
		register("precision", &r.Precision, runPrecision),
		register("overhead", &r.Overhead, runOverhead),
		register("throughput", &r.Throughput, runThroughput),
		register("scale", &r.Scale, runScale),
		register("fleet", &r.Fleet, runFleet),
		register("picture", &r.Picture, runPicture),
		register("pushback", &r.Pushback, runPushback),
		register("lanes", &r.Lanes, runLanes),
		register("destinations", &r.Destinations, runDestinations),
		register("peers", &r.Peers, runPeers),
		register("tuning", &r.Tuning, runTuning),
	}
}

// register is the entry of section name, which run measures into *dst.
func register[T any, S interface {
	*T
	section
}](name string, dst *S, run func(context.Context, *bench) (S, error)) entry {
	return entry{name: name,
		run: func(ctx context.Context, b *bench) (section, error) {
			s, err := run(ctx, b)
			if err != nil {
				return nil, err
			}
			*dst = s
			return s, nil
		},
		got: func() section {
			if *dst == nil {
				return nil
			}
			return *dst
		},
	}
}

// sectionNames are the sections' names, in order.
func sectionNames() []string {
	var names []string
	for _, e := range (&Report{}).sections() {
		names = append(names, e.name)
	}
	return names
}

// measured are the sections of r that hold figures, in order.
func (r *Report) measured() []section {
	var out []section
	for _, e := range r.sections() {
		if s := e.got(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func set(list string) map[string]bool {
	m := map[string]bool{}
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			m[s] = true
		}
	}
	return m
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
