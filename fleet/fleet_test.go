package fleet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// idle is a source with nothing to fetch and a sink that is never asked:
// the fleet's own behaviour is under test, not the pipeline's.
type idle struct{}

func (idle) Fetch(ctx context.Context, _ int) ([]*shaper.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (idle) Ready() error                { return nil }
func (idle) Close(context.Context) error { return nil }

type idleSink struct{}

func (idleSink) Send(context.Context, *shaper.Message) error { return nil }
func (idleSink) Close(context.Context) error                 { return nil }

// testConfig is a valid config of the named pipelines, each at limit, from a
// subject of its own.
func testConfig(t *testing.T, limit float64, names ...string) *config.File {
	t.Helper()
	cfg := &config.File{Shutdown: config.ShutdownConfig{DrainTimeout: time.Second}}
	for _, n := range names {
		cfg.Pipelines = append(cfg.Pipelines, config.Pipeline{
			Name:   n,
			Source: config.Source{NATS: &sources.NATSConfig{URL: "nats://127.0.0.1:4222", Subject: "s." + n}},
			Rate:   config.Rate{RateConfig: shaper.RateConfig{Limit: limit}},
			Sink:   config.Sink{HTTP: &sinks.HTTPConfig{URL: "https://sink.example/" + n}},
		})
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// build makes idle parts with a real limiter, and refuses a pipeline named
// "broken".
func build(pc config.Pipeline) (shaper.Parts, error) {
	if pc.Name == "broken" {
		return shaper.Parts{}, errors.New("cannot build")
	}
	lim, err := limiter.New(limiter.Config{Mode: limiter.Mode(pc.Rate.Mode), Limit: pc.Rate.Limit, Burst: *pc.Rate.Burst}, time.Now())
	return shaper.Parts{Source: idle{}, Sink: idleSink{}, Limiter: lim}, err
}

// running runs a fleet of cfg until the test ends, and returns it with the
// channel that reloads it.
func running(t *testing.T, cfg *config.File) (*Fleet, chan<- Reload) {
	t.Helper()
	f, err := New(cfg, nil, build, shaper.NewMetrics(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	reloads := make(chan Reload)
	done := make(chan struct{})
	go func() { f.Run(ctx, context.Background(), reloads); close(done) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the fleet did not drain within 10s")
		}
	})
	return f, reloads
}

// names returns the names of the fleet's pipelines, in order.
func names(f *Fleet) []string {
	var out []string
	for _, p := range f.Pipelines() {
		out = append(out, p.Name())
	}
	return out
}

func TestAReloadChangesTheRateInPlaceAndReplacesAPipelineWhoseSourceChanged(t *testing.T) {
	f, reloads := running(t, testConfig(t, 10, "a", "b"))
	before := f.Pipelines()

	next := testConfig(t, 20, "a", "b")
	next.Pipelines[1].Source.NATS.Subject = "s.elsewhere"
	reloads <- Reload{Config: next, Why: "test"}

	testwait.For(t, 5*time.Second, "b replaced", func() bool { return f.Pipelines()[1] != before[1] })
	after := f.Pipelines()
	if after[0] != before[0] {
		t.Error("pipeline a was replaced; want its rate changed in place")
	}
	if got := after[0].Status().Limit; got != 20 {
		t.Errorf("pipeline a's limit = %v; want 20", got)
	}
	if err := before[1].Ready(); err == nil || err.Error() != "draining" {
		t.Errorf("the replaced b: Ready() = %v; want draining", err)
	}
}

func TestAReloadAddsAndRemovesPipelinesAndKeepsThoseThatCannotBeBuilt(t *testing.T) {
	f, reloads := running(t, testConfig(t, 10, "a", "b"))
	reloads <- Reload{Config: testConfig(t, 10, "a", "c", "broken"), Why: "test"}
	testwait.For(t, 5*time.Second, "b gone, c added", func() bool {
		got := names(f)
		return len(got) == 2 && got[0] == "a" && got[1] == "c"
	})
	// The same config again changes nothing.
	a := f.Pipelines()[0]
	reloads <- Reload{Config: testConfig(t, 10, "a", "c"), Why: "test"}
	reloads <- Reload{Config: testConfig(t, 10, "a", "c"), Why: "test"} // the first has been applied once this one is taken
	if f.Pipelines()[0] != a {
		t.Error("an unchanged pipeline was replaced")
	}
}

func TestNewBuildsNothingWhenOnePipelineCannotBeBuilt(t *testing.T) {
	_, err := New(testConfig(t, 10, "a", "broken"), nil, build, shaper.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err == nil || err.Error() != "pipeline broken: cannot build" {
		t.Errorf("New = %v; want pipeline broken: cannot build", err)
	}
}

// closingSink records that it was closed.
type closingSink struct {
	idleSink
	closed chan<- struct{}
}

func (s closingSink) Close(context.Context) error { s.closed <- struct{}{}; return nil }

// A Builder that fails returns what it built before the failure; the
// fleet closes it, so a half-built pipeline leaves no connection open.
func TestThePartsBuiltBeforeABuildErrorAreClosed(t *testing.T) {
	closed := make(chan struct{}, 1)
	build := func(config.Pipeline) (shaper.Parts, error) {
		return shaper.Parts{Sink: closingSink{closed: closed}}, errors.New("source: cannot build")
	}
	_, err := New(testConfig(t, 10, "a"), nil, build, shaper.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cannot build") {
		t.Fatalf("New = %v; want the build error", err)
	}
	select {
	case <-closed:
	default:
		t.Error("the sink built before the error was not closed")
	}
}
