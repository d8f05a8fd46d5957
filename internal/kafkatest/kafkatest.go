// Package kafkatest runs an in-process Kafka (kfake, franz-go's Kafka
// protocol server) on 127.0.0.1 for tests, the way net/http/httptest runs an
// HTTP server. A cluster can be stopped and started again on the same
// address with the same data, as a broker outage.
package kafkatest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/freeport"
)

// Cluster is a one-broker kfake cluster on a fixed loopback port.
type Cluster struct {
	// Addr is the bootstrap address, host:port.
	Addr string

	t    testing.TB
	c    *kfake.Cluster
	opts []kfake.Opt
}

// Start runs a one-broker kfake cluster on a free loopback port with its
// data under t.TempDir(), plus opts (kfake.SeedTopics, kfake.EnableSASL with
// kfake.Superuser, and the like). It is closed when the test ends.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	port := freeport.Get(t)
	k := &Cluster{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	k.opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(t.TempDir())}, opts...)
	k.Restart()
	t.Cleanup(k.Stop)
	return k
}

// Kfake returns the running cluster, for its control functions.
func (k *Cluster) Kfake() *kfake.Cluster { return k.c }

// Stop closes the cluster, as an outage; Restart brings it back.
func (k *Cluster) Stop() {
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// Restart starts the cluster again on the same address and data, retrying
// for up to five seconds while the port lingers after a Stop.
func (k *Cluster) Restart() {
	k.t.Helper()
	k.Stop()
	var err error
	for range 50 {
		if k.c, err = kfake.NewCluster(k.opts...); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	k.t.Fatalf("kafkatest: start kfake on %s: %v", k.Addr, err)
}

// Client returns a franz-go client seeded with the cluster, plus opts; the
// caller closes it.
func (k *Cluster) Client(opts ...kgo.Opt) *kgo.Client {
	k.t.Helper()
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Addr)}, opts...)...)
	if err != nil {
		k.t.Fatalf("kafkatest: client: %v", err)
	}
	return c
}

// Produce writes recs to topic (acks=all) in chunks and waits for every one,
// failing the test after five minutes. Client options (a partitioner) may
// be added.
func (k *Cluster) Produce(topic string, recs []*kgo.Record, opts ...kgo.Opt) {
	k.t.Helper()
	c := k.Client(append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(16 << 20), kgo.MaxBufferedRecords(20000)}, opts...)...)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const chunk = 10000
	for from := 0; from < len(recs); from += chunk {
		if err := c.ProduceSync(ctx, recs[from:min(from+chunk, len(recs))]...).FirstErr(); err != nil {
			k.t.Fatalf("kafkatest: produce to %s: %v", topic, err)
		}
	}
}

// Records returns n records with value `{"n":i}`, keyed by i.
func Records(n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
	return recs
}

// SourceYAML is the value of a shaper config's source: for topic on the
// cluster at addr, consumed by group, as a YAML flow mapping. Its group
// timings make a group on kfake form in about a second instead of the
// production defaults' tens; extra are more entries, such as
// "commit_interval: 1s".
func SourceYAML(addr, topic, group string, extra ...string) string {
	s := fmt.Sprintf(`{kafka: {brokers: ["%s"], topic: %s, group: %s, session_timeout: 6s, heartbeat_interval: 100ms, rebalance_timeout: 2s, max_wait: 200ms`,
		addr, topic, group)
	for _, e := range extra {
		s += ", " + e
	}
	return s + "}}"
}
