//go:build nodemo

package main

import (
	"context"
	"fmt"
	"io"
)

// demoCmd stands in for the demo in the release build (-tags nodemo: the
// container image and make build). The demo's embedded nats-server and kfake
// would nearly double the binary and put a message broker and a fake Kafka
// into what vulnerability scanners report, for a command a deployment never
// runs; from a checkout, make run or go run ./cmd/shaper demo has it.
func demoCmd(context.Context, []string, *globals, io.Writer, io.Writer) error {
	return fmt.Errorf("%w: this build leaves the demo out; run it from a checkout: make run", errUsage)
}
