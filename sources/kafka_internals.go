package sources

import (
	"fmt"
	"io"

	"github.com/segmentio/kafka-go/protocol"
)

// kafkaGoChecked is the version of github.com/segmentio/kafka-go whose
// internals toBroker was checked against. kafka_internals_test.go fails when
// go.mod requires another one.
const kafkaGoChecked = "v0.4.51"

// toBroker is a request that kafka-go's Transport sends to the broker with
// the given ID, whatever the request's own routing: groupCoordinator sends
// its commits to the group's coordinator this way, without the lookup that
// the Transport makes before every group request. It is the Kafka source's
// only hook into kafka-go below its client API (Reader, ConsumerGroup,
// Client, and Transport.RoundTrip with a protocol request).
//
// It relies on these behaviours of kafka-go (as of kafkaGoChecked), which no
// type check can see:
//
//   - Transport.RoundTrip routes a request that implements
//     protocol.BrokerMessage to the broker its Broker method returns, given
//     the cluster as the Transport's metadata has it (protocol.Cluster, its
//     Brokers keyed by node ID), and looks no coordinator up for it: the
//     connection pool checks BrokerMessage before GroupMessage, and toBroker
//     is no GroupMessage.
//   - The connection to that broker sends the request with
//     protocol.Conn.RoundTrip, which hands a protocol.RawExchanger whose
//     Required returns true the *protocol.Conn itself (RawExchange) instead
//     of encoding the request by its type. Encoding toBroker by its type
//     panics in the connection's goroutine: it is not a type kafka-go knows.
//   - protocol.Conn.RoundTrip of the wrapped request encodes it with the API
//     version the connection negotiated, and returns the decoded answer.
//
// kafka_internals_test.go checks the shapes of these types, sends a toBroker
// through a Transport to kfake, and fails when go.mod requires a kafka-go
// other than kafkaGoChecked, so that an upgrade checks them again. Should one
// no longer hold, the way back is kafka-go's Client.OffsetCommit, which
// carries the same fields (metadata, generation ID, member ID) but looks the
// coordinator up before every commit.
type toBroker struct {
	protocol.Message
	id int32
}

// Broker returns the broker the request goes to (protocol.BrokerMessage).
func (r toBroker) Broker(cluster protocol.Cluster) (protocol.Broker, error) {
	b, ok := cluster.Brokers[r.id]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("broker %d is not in the cluster's metadata", r.id)
	}
	return b, nil
}

// Required reports that the connection is to call RawExchange
// (protocol.RawExchanger).
func (toBroker) Required(map[protocol.ApiKey]int16) bool { return true }

// RawExchange sends the request on rw, the connection to the broker, as that
// connection would send it on its own, with the API version it negotiated.
func (r toBroker) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	pc, ok := rw.(*protocol.Conn)
	if !ok {
		return nil, fmt.Errorf("kafka-go handed the %s request a %T, not its connection", r.ApiKey(), rw)
	}
	return pc.RoundTrip(r.Message)
}

var (
	_ protocol.BrokerMessage = toBroker{}
	_ protocol.RawExchanger  = toBroker{}
)
