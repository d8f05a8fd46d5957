//go:build nodemo

package main

import (
	"context"
	"errors"

	"github.com/shaper-dev/shaper/shaper"
)

// The release build has no demo brokers, and scrapeRunningShaper
// (deploy_test.go) borrows them. These stand-ins let the package's tests
// compile under -tags nodemo, so that go vet -tags nodemo checks them; the
// tests that need the demo's brokers fail with errNoDemoBrokers. CI runs the
// tests in the default build, which has the demo.
type demoBroker interface {
	source() shaper.SourceConfig
	publish(ctx context.Context, bodies [][]byte) error
	close()
	String() string
}

var errNoDemoBrokers = errors.New("this build (-tags nodemo) leaves the demo's embedded brokers out; run the test without the tag")

func startNATSDemo(context.Context) (demoBroker, error) { return nil, errNoDemoBrokers }

func startKafkaDemo() (demoBroker, error) { return nil, errNoDemoBrokers }
