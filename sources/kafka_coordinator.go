package sources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
)

// groupCoordinator talks to the broker that coordinates a consumer group
// about the group's offsets of one topic: it commits them, with metadata,
// and reads them back. Commits go straight to the coordinator, which it looks
// up once and remembers until a request to it fails (see toBroker): kafka-go's
// Transport looks the coordinator up (FindCoordinator) before every group
// request it sends, a request more to the broker for every commit. Reading
// the committed offsets, once per partition taken over, goes through
// kafka-go's Client.
//
// groupCoordinator is safe for concurrent use by multiple goroutines.
type groupCoordinator struct {
	transport *kafka.Transport
	addr      net.Addr // the brokers
	group     string
	topic     string
	id        atomic.Int32 // the coordinator's broker ID; -1 while unknown
}

func newGroupCoordinator(transport *kafka.Transport, addr net.Addr, group, topic string) *groupCoordinator {
	c := &groupCoordinator{transport: transport, addr: addr, group: group, topic: topic}
	c.id.Store(-1)
	return c
}

// commit commits marks with gen, and returns each partition's answer: nil
// when the group committed it, else the broker's error; a partition missing
// from the answers had none. Like kafka-go's Generation.CommitOffsets, which
// cannot carry metadata, it commits with gen's generation ID and member ID,
// so the group refuses it once gen is over and another member may own the
// partitions.
func (c *groupCoordinator) commit(ctx context.Context, gen *kafka.Generation, marks []partitionMark) (map[int]error, error) {
	parts := make([]offsetcommit.RequestPartition, len(marks))
	for i, m := range marks {
		parts[i] = offsetcommit.RequestPartition{
			PartitionIndex:       int32(m.Partition),
			CommittedOffset:      m.Offset,
			CommittedLeaderEpoch: -1, // unknown: kafka-go tracks no leader epochs
			CommittedMetadata:    m.Metadata,
		}
	}
	req := &offsetcommit.Request{
		GroupID:         c.group,
		GenerationID:    gen.ID,
		MemberID:        gen.MemberID,
		RetentionTimeMs: -1, // the broker's offsets.retention.minutes
		Topics:          []offsetcommit.RequestTopic{{Name: c.topic, Partitions: parts}},
	}
	res, err := c.roundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	r, ok := res.(*offsetcommit.Response)
	if !ok {
		return nil, fmt.Errorf("answered with a %T", res)
	}
	answers := make(map[int]error, len(marks))
	for _, t := range r.Topics {
		if t.Name != c.topic {
			continue
		}
		for _, p := range t.Partitions {
			var err error
			if p.ErrorCode != 0 {
				err = kafka.Error(p.ErrorCode)
			}
			if isCoordinatorError(err) {
				c.forget() // it moved: look it up for the next commit
			}
			answers[int(p.PartitionIndex)] = err
		}
	}
	return answers, nil
}

// fetchCommitted returns the group's committed offset of partition (-1 when
// there is none) and its metadata.
func (c *groupCoordinator) fetchCommitted(ctx context.Context, partition int) (int64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, kafkaRequestTimeout)
	defer cancel()
	cl := kafka.Client{Addr: c.addr, Transport: c.transport}
	res, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{
		GroupID: c.group,
		Topics:  map[string][]int{c.topic: {partition}},
	})
	if err != nil {
		return 0, "", err
	}
	if res.Error != nil {
		return 0, "", res.Error
	}
	for _, p := range res.Topics[c.topic] {
		if p.Partition == partition {
			return p.CommittedOffset, p.Metadata, p.Error
		}
	}
	return 0, "", fmt.Errorf("no offset of partition %d in the answer", partition)
}

// closeIdle closes the connections not in use; the next request opens new
// ones.
func (c *groupCoordinator) closeIdle() {
	c.transport.CloseIdleConnections()
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
