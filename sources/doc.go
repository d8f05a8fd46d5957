// Package sources is where a pipeline's messages come from. Each type here
// consumes one broker and implements shaper.Source; cmd/shaper builds it from
// the pipeline's source config.
//
// # Back-pressure
//
// The pipeline calls Fetch only when its bucket has room and never asks for
// more than that room, so a source fetches only what it is asked for and the
// broker stays the real buffer: a full bucket stops fetching and loses
// nothing. Memory is bounded by the bucket's capacity, whatever the backlog in
// the broker.
//
// # Delivery guarantees
//
// A JetStream source (NATS with a stream; JetStream) is at-least-once. A message is
// acked only when the pipeline settles it with its final outcome; until then
// the server keeps it, and the source keeps telling the server it is still
// being worked on, so a message waiting in the bucket is never redelivered
// meanwhile. Whatever is not acked when the process dies (a crash, kill -9)
// is redelivered after the consumer's AckWait. Duplicates are possible (a
// lost ack); each message carries a stable ID for the sink to drop them.
//
// A Kafka source (Kafka) is at-least-once too: it commits, per partition, only the
// offsets below the lowest message not yet acked, so a crash redelivers every
// unfinished message (and those acked after the last commit), while a nacked
// message is redelivered by the source itself, its offset held uncommitted.
//
// A core NATS source (NATS without a stream; CoreNATS) is at-most-once by nature: the
// server does not keep messages, so what arrives while the bucket and the
// source's buffer are full is dropped and counted (shaper.DropCounter), what
// is buffered when the process stops is lost, and a Nack cannot bring a
// message back.
package sources

import "errors"

// ErrAlreadySettled is returned by a Receipt's Ack or Nack when the message has
// already been settled; the second call has no effect.
var ErrAlreadySettled = errors.New("message already settled")
