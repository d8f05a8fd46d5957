// Package faults is shaper's fault suite: it builds the shaper binary once,
// runs real `shaper run` child processes against real servers (an embedded
// nats-server, kfake for Kafka, a redis-server process, HTTP sinks on
// loopback that record every request) and breaks things around them: kill -9
// at random moments, signals during a drain, sinks that fail, hang, refuse,
// reset or drip, brokers that restart, Redis that dies or stalls, a fleet
// of replicas sharing one rate with one of them stopped again and again by
// signals or cut off from Redis, poison input, a large backlog. Each test states in its name the promise it
// checks; together they hold shaper to the delivery contract of docs/guarantees.md:
// every message ends delivered or dead-lettered, nothing is lost, the rate
// and max_in_flight hold under retries.
//
// The package holds tests only:
//
//	go test -race -count=1 -timeout 10m ./faults/
//
// and, opt-in and not in CI, a long soak of mixed faults:
//
//	go test -race -run TestSoak -timeout 20m ./faults/ -args -soak=10m
//
// docs/reliability.md records what the suite found and measured.
package faults
