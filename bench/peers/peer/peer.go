// Package peer is what the programs of the bench's peers section share:
// the message every party delivers (the brokers' backlogs and the core
// NATS feed are made of it and the Benthos case generates it, so every
// party sends the sink the same bytes), and how each program runs.
package peer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main runs run with the program's arguments until SIGTERM or SIGINT, and
// exits 1 with its error, prefixed with the program's name.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, done := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	done()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Size is the length of every body, in bytes: a payment notification with
// the fields a real one carries around its envelope.
const Size = 200

// Body returns the body of message i: Size bytes of JSON, the message's
// number in it and padding in its note. i is at most ten digits long.
func Body(i int) []byte {
	b := fmt.Appendf(make([]byte, 0, Size), `{"payment":"pay_%010d","status":"settled","amount":1250,"currency":"EUR","note":"`, i)
	b = append(b, bytes.Repeat([]byte{'x'}, Size-len(b)-2)...)
	return append(b, `"}`...)
}
