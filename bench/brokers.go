package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/sources"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// payload is the body of message i: a small JSON callback, the size of a
// typical payment notification's envelope (about 100 bytes).
func payload(i int) []byte {
	return fmt.Appendf(nil, `{"payment":"pay_%010d","status":"settled","amount":1250,"currency":"EUR"}`, i)
}

// jetStream is an embedded nats-server with JetStream on loopback, in this
// process.
type jetStream struct {
	dir string
	srv *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startJetStream() (_ *jetStream, err error) {
	j := &jetStream{}
	defer func() {
		if err != nil {
			j.close()
		}
	}()
	if j.dir, err = os.MkdirTemp("", "shaper-bench-nats-"); err != nil {
		return nil, err
	}
	j.srv, err = server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: j.dir, NoLog: true, NoSigs: true,
		JetStreamMaxMemory: 1 << 30, JetStreamMaxStore: 8 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go j.srv.Start()
	if !j.srv.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("embedded nats-server not ready after 10s")
	}
	if j.nc, err = nats.Connect(j.srv.ClientURL()); err != nil {
		return nil, err
	}
	if j.js, err = jetstream.New(j.nc, jetstream.WithPublishAsyncMaxPending(4096)); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *jetStream) URL() string { return j.srv.ClientURL() }

// stream creates a file-backed stream named name on subject name+".in".
func (j *jetStream) stream(ctx context.Context, name string) error {
	_, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".in"}})
	return err
}

func (j *jetStream) deleteStream(ctx context.Context, name string) {
	_ = j.js.DeleteStream(ctx, name) // frees disk between cases; nothing depends on it
}

// publish puts n messages into the stream's subject and waits for every ack.
// If at is not nil, it records when each publish was made.
func (j *jetStream) publish(ctx context.Context, name string, first, n int, at []time.Time) error {
	for i := range n {
		if at != nil {
			at[i] = time.Now()
		}
		if _, err := j.js.PublishAsync(name+".in", payload(first+i)); err != nil {
			return err
		}
	}
	select {
	case <-j.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Minute):
		return errors.New("jetstream publish: acks still pending after 2m")
	}
}

// sourceConfig is the in-process pipeline source config for the stream.
func (j *jetStream) sourceConfig(name, durable string) config.Source {
	return config.Source{NATS: &sources.NATSConfig{URL: j.URL(), Subject: name + ".in", Stream: name, Durable: durable}}
}

func (j *jetStream) close() {
	if j.nc != nil {
		j.nc.Close()
	}
	if j.srv != nil {
		j.srv.Shutdown()
		j.srv.WaitForShutdown()
	}
	if j.dir != "" {
		_ = os.RemoveAll(j.dir)
	}
}

// kafkaPartitions is how many partitions every benchmark topic has.
const kafkaPartitions = 4

// kafkaCluster is kfake, franz-go's in-process Kafka, on loopback, with a
// franz-go client to produce.
type kafkaCluster struct {
	c  *kfake.Cluster
	cl *kgo.Client
}

func startKafka(topics ...string) (*kafkaCluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, topics...))
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(100_000),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kgo: %w", err)
	}
	return &kafkaCluster{c: c, cl: cl}, nil
}

// publish produces n records to topic, round robin over its partitions,
// and waits for every ack.
func (k *kafkaCluster) publish(ctx context.Context, topic string, first, n int) error {
	errc := make(chan error, 1)
	for i := range n {
		rec := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(first + i)), Value: payload(first + i)}
		k.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := k.cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("kafka produce: %w", err)
	default:
		return nil
	}
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
        group: %s%s`, k.c.ListenAddrs()[0], topic, group, timings)
}

// sourceConfig is the in-process pipeline source config for topic and
// group, with the fast group timings of sourceYAML.
func (k *kafkaCluster) sourceConfig(topic, group string) config.Source {
	return config.Source{Kafka: &sources.KafkaConfig{
		Config:            kafkaconn.Config{Brokers: k.c.ListenAddrs()},
		Topic:             topic,
		Group:             group,
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		MaxWait:           200 * time.Millisecond,
	}}
}

func (k *kafkaCluster) close() {
	k.cl.Close()
	k.c.Close()
}

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
