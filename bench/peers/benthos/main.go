// Command benthos is Benthos core (github.com/redpanda-data/benthos/v4, MIT)
// with its pure and io components, built as the stock `benthos` command:
// the Benthos peer of shaper in the bench's peers section, which runs it
// as `benthos -c config.yaml`. It is a module of its own so that Benthos's
// dependencies stay out of shaper's go.mod.
//
// Benthos core has no NATS or Kafka input (those are in Redpanda Connect),
// so the bench feeds it from its generate input: it measures Benthos's
// pipeline, rate_limit resource and http_client output with no broker.
package main

import (
	"context"

	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	"github.com/redpanda-data/benthos/v4/public/service"
)

func main() {
	service.RunCLI(context.Background())
}
