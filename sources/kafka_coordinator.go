package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
)

// groupCoordinator sends a consumer group's requests (its commits) straight
// to the broker that coordinates the group, which it looks up once and
// remembers until a request to it fails. kafka-go's Transport looks the
// coordinator up (FindCoordinator) before every group request it sends: a
// request more to the broker for every commit.
//
// groupCoordinator is safe for concurrent use by multiple goroutines.
type groupCoordinator struct {
	transport *kafka.Transport
	addr      net.Addr
	group     string
	id        atomic.Int32 // the coordinator's broker ID; -1 while unknown
}

func newGroupCoordinator(transport *kafka.Transport, addr net.Addr, group string) *groupCoordinator {
	c := &groupCoordinator{transport: transport, addr: addr, group: group}
	c.id.Store(-1)
	return c
}

// roundTrip sends req to the group's coordinator, looking it up first when
// it is not known, and returns the answer. When the request fails, the
// coordinator is looked up again for the next one.
func (c *groupCoordinator) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	id := c.id.Load()
	if id < 0 {
		var err error
		if id, err = c.lookUp(ctx); err != nil {
			return nil, err
		}
		c.id.Store(id)
	}
	res, err := c.transport.RoundTrip(ctx, c.addr, toBroker{Message: req, id: id})
	if err != nil {
		c.forget()
	}
	return res, err
}

// forget has the next request look the coordinator up again: a request to
// it failed, or it answered that it is not (or no longer) the group's.
func (c *groupCoordinator) forget() {
	c.id.Store(-1)
}

// lookUp asks the cluster which broker coordinates the group.
func (c *groupCoordinator) lookUp(ctx context.Context) (int32, error) {
	res, err := c.transport.RoundTrip(ctx, c.addr, &findcoordinator.Request{Key: c.group})
	if err != nil {
		return -1, fmt.Errorf("find the coordinator of group %q: %w", c.group, err)
	}
	r, ok := res.(*findcoordinator.Response)
	switch {
	case !ok:
		return -1, fmt.Errorf("find the coordinator of group %q: answered with a %T", c.group, res)
	case r.ErrorCode != 0:
		return -1, fmt.Errorf("find the coordinator of group %q: %w", c.group, kafka.Error(r.ErrorCode))
	case r.NodeID < 0:
		return -1, fmt.Errorf("find the coordinator of group %q: no broker named", c.group)
	}
	return r.NodeID, nil
}

// isCoordinatorError reports whether err, a broker's answer, says that the
// group is to be asked of another broker, or of the same one later.
func isCoordinatorError(err error) bool {
	return errors.Is(err, kafka.NotCoordinatorForGroup) || errors.Is(err, kafka.GroupCoordinatorNotAvailable)
}

// toBroker is a request that kafka-go's Transport sends to the broker with
// the given ID, whatever the request's own routing. The connection to that
// broker sends the request itself (RawExchange): kafka-go encodes a request
// by its type, which the wrapper is not.
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
