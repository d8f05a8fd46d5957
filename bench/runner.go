package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/embedded"
	"github.com/shaper-dev/shaper/sources"
)

// bench is the runner every section shares: the options, the shaper
// binary of the `shaper run` children and the embedded brokers, which
// live through the whole run.
type bench struct {
	o     *options
	bin   string
	js    *embedded.JetStream
	kafka *embedded.Kafka
}

// kafkaPartitions is how many partitions every benchmark topic has.
const kafkaPartitions = 4

// kafkaTopics are the Kafka topics of the run, created with the cluster.
var kafkaTopics = []string{"steady", "idle", "through", "backlog100k", "backlog1m", "lanes1", "lanes10k", "lanesbacklog",
	"destinations", "destination1", "destinationurl"}

func startBench(ctx context.Context, o *options) (_ *bench, err error) {
	b := &bench{o: o}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if b.bin = o.shaper; b.bin == "" {
		progress("building cmd/shaper")
		b.bin = filepath.Join(o.tmp, "shaper")
		if _, err := b.goCmd(ctx, o.root, "build", "-o", b.bin, "./cmd/shaper"); err != nil {
			return nil, err
		}
	}
	if b.js, err = startJetStream(); err != nil {
		return nil, err
	}
	if b.kafka, err = embedded.StartKafka(kafkaPartitions, kafkaTopics...); err != nil {
		return nil, err
	}
	return b, nil
}

// startJetStream starts the embedded nats-server with JetStream, with the
// limits the largest backlogs need and room for more acks in flight than
// the client's default.
func startJetStream() (*embedded.JetStream, error) {
	return embedded.StartJetStream(embedded.JetStreamOptions{MaxMemory: 1 << 30, MaxStore: 8 << 30, MaxPending: 4096})
}

func (b *bench) close() {
	if b.kafka != nil {
		b.kafka.Close()
	}
	if b.js != nil {
		b.js.Close()
	}
}

// goCmd runs `go args...` in dir and returns its output.
func (b *bench) goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out), nil
}

// goBench runs `go test -run ^$ -bench args...` from the module root, and
// returns the command line and its output.
func (b *bench) goBench(ctx context.Context, args ...string) (command, out string, err error) {
	args = append([]string{"test", "-run", "^$", "-bench"}, args...)
	command = "go " + strings.Join(args, " ")
	progress("%s", command)
	out, err = b.goCmd(ctx, b.o.root, args...)
	return command, out, err
}

// payload is the body of message i: a small JSON callback, the size of a
// typical payment notification's envelope (about 100 bytes).
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"payment":"pay_%010d","status":"settled","amount":1250,"currency":"EUR"}`, i)
}

// stream creates a file-backed stream name on subject name+".in" holding
// messages n payloads, and returns a function that deletes it.
func (b *bench) stream(ctx context.Context, name string, messages int) (func(), error) {
	if err := b.js.CreateStream(ctx, name, name+".in"); err != nil {
		return nil, err
	}
	drop := func() { _ = b.js.DeleteStream(context.WithoutCancel(ctx), name) } // frees disk; nothing depends on it
	if err := b.publish(ctx, name, messages, nil); err != nil {
		drop()
		return nil, err
	}
	return drop, nil
}

// publish puts n payloads into the stream's subject and waits for every
// ack; with at, it records when each publish was made.
func (b *bench) publish(ctx context.Context, name string, n int, at []time.Time) error {
	return b.js.Publish(ctx, name+".in", n, func(i int) []byte {
		if at != nil {
			at[i] = time.Now()
		}
		return payload(i)
	})
}

// natsSource is the source of an in-process pipeline reading the stream.
func (b *bench) natsSource(name, durable string) config.Source {
	return config.Source{NATS: &sources.NATSConfig{URL: b.js.URL(), Subject: name + ".in", Stream: name, Durable: durable}}
}

// natsYAML is the source block of a `shaper run` config reading the
// stream as durable ("" for an ephemeral consumer).
func (b *bench) natsYAML(name, durable string) string {
	return natsSourceYAML(b.js.URL(), name+".in", name, durable)
}

// natsSourceYAML is the source block of a `shaper run` config reading
// subject from the server at url: through stream as durable ("" for an
// ephemeral consumer), or from core NATS when stream is "".
func natsSourceYAML(url, subject, stream, durable string) string {
	block := fmt.Sprintf("{url: %q, subject: %s", url, subject)
	if stream != "" {
		block += ", stream: " + stream
	}
	if durable != "" {
		block += ", durable: " + durable
	}
	return "\n      nats: " + block + "}"
}

// publishKafka produces n payloads to topic, round robin over its
// partitions, and waits for every ack.
func (b *bench) publishKafka(ctx context.Context, topic string, n int) error {
	return b.kafka.Publish(ctx, topic, n, func(i int) ([]byte, []byte) { return []byte(strconv.Itoa(i)), payload(i) })
}

// kafkaYAML is the source block of a `shaper run` config for topic and
// group of the run's kfake.
func (b *bench) kafkaYAML(topic, group string, fast bool) string {
	return kafkaSourceYAML(b.kafka.Addrs()[0], topic, group, fast)
}

// kafkaSourceYAML is the source block of a `shaper run` config for topic
// and group of the broker at addr, with the group timings that make a
// kfake group form in a second or two (TOOLCHAIN.md) when fast, else the
// production defaults.
func kafkaSourceYAML(addr, topic, group string, fast bool) string {
	timings := ""
	if fast {
		timings = "\n        session_timeout: 6s\n        heartbeat_interval: 100ms\n        rebalance_timeout: 2s\n        max_wait: 200ms"
	}
	return fmt.Sprintf("\n      kafka:\n        brokers: [%q]\n        topic: %s\n        group: %s%s", addr, topic, group, timings)
}

// waitFor polls cond until it holds, and reports whether it did within
// timeout.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// redisServer is a real redis-server child process on a free loopback
// port, its output in dir like any child's.
type redisServer struct {
	*proc
	Addr   string
	client *redis.Client
}

func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install redis-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := startProc(dir, "redis-server", path, nil, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	if err != nil {
		return nil, err
	}
	r := &redisServer{proc: p, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.client = redis.NewClient(&redis.Options{Addr: r.Addr})
	if err := p.wait(ctx, 10*time.Second, func() bool { return r.client.Ping(ctx).Err() == nil }); err != nil {
		r.close()
		return nil, fmt.Errorf("redis-server on %s: %w", r.Addr, err)
	}
	return r, nil
}

// scriptCalls returns how many EVALSHA and EVAL calls the server has run
// since its statistics were last reset (INFO commandstats).
func (r *redisServer) scriptCalls(ctx context.Context) (int64, error) {
	info, err := r.client.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var calls int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			}
		}
	}
	return calls, nil
}

func (r *redisServer) close() {
	_ = r.client.Close()
	r.kill()
}

// freePort returns a loopback port that was free when asked.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
