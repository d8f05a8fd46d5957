// Package embedded runs the brokers that `shaper demo` and the bench harness
// start inside their own process: a nats-server with JetStream, and kfake,
// franz-go's Kafka protocol server. Each comes with what both callers do to
// it before a pipeline reads from it: create a stream or seed topics, then
// publish a batch and wait until the broker holds all of it.
//
// It is for the demo and the bench only, never the daemon. Importing it
// links a whole message broker and a fake Kafka into the binary, so
// cmd/shaper imports it from one file that the release build (-tags nodemo)
// leaves out; the tests there check that it stays out.
package embedded
