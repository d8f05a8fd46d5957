package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/embedded"
	"github.com/shaper-dev/shaper/sources"
)

// payload is the body of message i: a small JSON callback, the size of a
// typical payment notification's envelope (about 100 bytes).
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"payment":"pay_%010d","status":"settled","amount":1250,"currency":"EUR"}`, i)
}

// jetStream is the embedded nats-server with JetStream, with the limits the
// largest backlogs need and room for more acks in flight than the client's
// default.
type jetStream struct {
	*embedded.JetStream
}

func startJetStream() (*jetStream, error) {
	j, err := embedded.StartJetStream(embedded.JetStreamOptions{MaxMemory: 1 << 30, MaxStore: 8 << 30, MaxPending: 4096})
	if err != nil {
		return nil, err
	}
	return &jetStream{j}, nil
}

// stream creates a file-backed stream named name on subject name+".in".
func (j *jetStream) stream(ctx context.Context, name string) error {
	return j.CreateStream(ctx, name, name+".in")
}

func (j *jetStream) deleteStream(ctx context.Context, name string) {
	_ = j.DeleteStream(ctx, name) // frees disk between cases; nothing depends on it
}

// publish puts n messages into the stream's subject and waits for every ack.
// If at is not nil, it records when each publish was made.
func (j *jetStream) publish(ctx context.Context, name string, first, n int, at []time.Time) error {
	return j.Publish(ctx, name+".in", n, func(i int) []byte {
		if at != nil {
			at[i] = time.Now()
		}
		return payload(first + i)
	})
}

// sourceConfig is the in-process pipeline source config for the stream.
func (j *jetStream) sourceConfig(name, durable string) config.Source {
	return config.Source{NATS: &sources.NATSConfig{URL: j.URL(), Subject: name + ".in", Stream: name, Durable: durable}}
}

func (j *jetStream) close() { j.Close() }

// kafkaPartitions is how many partitions every benchmark topic has.
const kafkaPartitions = 4

// kafkaCluster is kfake, franz-go's in-process Kafka, on loopback.
type kafkaCluster struct {
	*embedded.Kafka
}

func startKafka(topics ...string) (*kafkaCluster, error) {
	k, err := embedded.StartKafka(kafkaPartitions, topics...)
	if err != nil {
		return nil, err
	}
	return &kafkaCluster{k}, nil
}

// publish produces n records to topic, round robin over its partitions,
// and waits for every ack.
func (k *kafkaCluster) publish(ctx context.Context, topic string, first, n int) error {
	return k.Publish(ctx, topic, n, func(i int) ([]byte, []byte) {
		return []byte(strconv.Itoa(first + i)), payload(first + i)
	})
}

// sourceYAML is the source block of a `shaper run` config for topic and
// group, with the group timings that make a kfake group form in a second or
// two (TOOLCHAIN.md) when fast, else the production defaults.
func (k *kafkaCluster) sourceYAML(topic, group string, fast bool) string {
	timings := ""
	if fast {
		timings = `
        session_timeout: 6s
        heartbeat_interval: 100ms
        rebalance_timeout: 2s
        max_wait: 200ms`
	}
	return fmt.Sprintf(`
      kafka:
        brokers: [%q]
        topic: %s
        group: %s%s`, k.Addrs()[0], topic, group, timings)
}

// sourceConfig is the in-process pipeline source config for topic and
// group, with the fast group timings of sourceYAML.
func (k *kafkaCluster) sourceConfig(topic, group string) config.Source {
	return config.Source{Kafka: sources.InProcessKafka(k.Addrs(), topic, group)}
}

func (k *kafkaCluster) close() { k.Close() }

// redisServer is a real redis-server child process on a free loopback port.
type redisServer struct {
	Addr   string
	cmd    *exec.Cmd
	client *redis.Client
}

func startRedis(ctx context.Context) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install redis-server): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.cmd = exec.Command(path, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	// Output goes nowhere: a pipe nobody reads would block the server.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with the harness
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	r.client = redis.NewClient(&redis.Options{Addr: r.Addr})
	deadline := time.Now().Add(10 * time.Second)
	for r.client.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			r.close()
			return nil, fmt.Errorf("redis-server not answering on %s after 10s", r.Addr)
		}
		time.Sleep(20 * time.Millisecond)
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

func (r *redisServer) resetStats(ctx context.Context) error {
	return r.client.ConfigResetStat(ctx).Err()
}

func (r *redisServer) close() {
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait() // the kill is the expected end
	}
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
