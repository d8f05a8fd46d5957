package sources

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaGoModule is the module whose internals toBroker relies on.
const kafkaGoModule = "github.com/segmentio/kafka-go"

// reCheck says what to do when a test of this file fails.
const reCheck = "toBroker (kafka_internals.go) relies on kafka-go internals: re-check each behaviour its doc lists " +
	"against the new kafka-go (transport.go connPool.sendRequest, protocol/conn.go Conn.RoundTrip), " +
	"then update kafkaGoChecked"

// An upgrade of kafka-go has toBroker's reliance on its internals checked
// again: go.mod must require the version they were checked against, and
// not replace it.
func TestKafkaGoIsTheVersionItsInternalsWereCheckedAgainst(t *testing.T) {
	version, replaced := goModRequirement(t, kafkaGoModule)
	if version != kafkaGoChecked || replaced {
		t.Fatalf("go.mod requires %s %s (replaced: %v); the internals were checked against %s. %s",
			kafkaGoModule, version, replaced, kafkaGoChecked, reCheck)
	}
}

// goModRequirement returns the version of module that the go.mod at the
// module's root requires, and whether it replaces module.
func goModRequirement(t *testing.T, module string) (version string, replaced bool) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && (fields[0] == "require" || fields[0] == "replace") {
			fields = fields[1:] // a directive of one line
		}
		switch {
		case len(fields) < 2 || fields[0] != module:
		case slices.Contains(fields, "=>"):
			replaced = true
		default:
			version = fields[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return version, replaced
}

// The kafka-go types toBroker works with have the shape its doc describes:
// a method more or less on an interface, or another type of field, changes
// what kafka-go does with it even where the code still compiles.
func TestKafkaGoInternalsHaveTheShapeToBrokerReliesOn(t *testing.T) {
	message := reflect.TypeFor[protocol.Message]()
	tests := []struct {
		give reflect.Type
		want []string // its methods, or for a struct the fields it relies on
	}{
		{give: reflect.TypeFor[protocol.RawExchanger](), want: []string{
			"RawExchange func(io.ReadWriter) (protocol.Message, error)",
			"Required func(map[protocol.ApiKey]int16) bool",
		}},
		{give: reflect.TypeFor[protocol.BrokerMessage](), want: []string{
			"Broker func(protocol.Cluster) (protocol.Broker, error)",
		}},
		{give: reflect.TypeFor[protocol.Cluster](), want: []string{"Brokers map[int32]protocol.Broker"}},
		{give: reflect.TypeFor[protocol.Broker](), want: []string{"ID int32"}},
	}
	for _, tt := range tests {
		got := typeShape(tt.give, tt.want)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%v has %q; want %q. %s", tt.give, got, tt.want, reCheck)
		}
	}
	roundTrip, ok := reflect.TypeFor[*protocol.Conn]().MethodByName("RoundTrip")
	if want := reflect.FuncOf([]reflect.Type{reflect.TypeFor[*protocol.Conn](), message}, []reflect.Type{message, reflect.TypeFor[error]()}, false); !ok || roundTrip.Type != want {
		t.Errorf("(*protocol.Conn).RoundTrip is %v; want %v. %s", roundTrip.Type, want, reCheck)
	}
	if reflect.TypeFor[toBroker]().Implements(reflect.TypeFor[protocol.GroupMessage]()) {
		t.Errorf("toBroker is a protocol.GroupMessage: kafka-go would route it by the group's coordinator")
	}
}

// typeShape returns the methods of an interface type, or of a struct type
// the fields named in want, each as "Name type".
func typeShape(typ reflect.Type, want []string) []string {
	var out []string
	if typ.Kind() == reflect.Interface {
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			out = append(out, m.Name+" "+m.Type.String())
		}
		return out
	}
	for _, w := range want {
		name, _, _ := strings.Cut(w, " ")
		if f, ok := typ.FieldByName(name); ok {
			out = append(out, name+" "+f.Type.String())
		}
	}
	return out
}

// A toBroker goes to the broker it names, not to the group's coordinator,
// written by the connection to that broker with the version it negotiated,
// and its answer comes back decoded.
func TestToBrokerSendsTheRequestToTheBrokerItNames(t *testing.T) {
	t.Parallel()
	c := startKfake(t, kfake.NumBrokers(3))
	var mu sync.Mutex
	var seen []int32 // the broker of each OffsetCommit
	c.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.OffsetCommitRequest)
		mu.Lock()
		seen = append(seen, c.CurrentNode())
		mu.Unlock()
		return offsetCommitAnswer(req, func(rp kmsg.OffsetCommitRequestTopicPartition) int16 {
			if rp.Metadata == nil || *rp.Metadata != "s1:7:1+1" || rp.Offset != 7 {
				return kerr.InvalidRequest.Code // the fields did not arrive
			}
			return 0
		}), nil, true
	})
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range []int32{2, 0, 1} {
		req := &offsetcommit.Request{GroupID: "g", GenerationID: -1, Topics: []offsetcommit.RequestTopic{{
			Name:       kafkaTestTopic,
			Partitions: []offsetcommit.RequestPartition{{PartitionIndex: 0, CommittedOffset: 7, CommittedMetadata: "s1:7:1+1"}},
		}}}
		res, err := tr.RoundTrip(ctx, kafka.TCP(c.ListenAddrs()...), toBroker{Message: req, id: id})
		if err != nil {
			t.Fatalf("RoundTrip(toBroker %d): %v. %s", id, err, reCheck)
		}
		r, ok := res.(*offsetcommit.Response)
		if !ok || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 || r.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("RoundTrip(toBroker %d) = %#v; want an OffsetCommit answer without error. %s", id, res, reCheck)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int32{2, 0, 1}; !slices.Equal(seen, want) {
		t.Errorf("the OffsetCommits went to brokers %v; want %v. %s", seen, want, reCheck)
	}
}
