// Package backlog is the message that every party of the bench's peers
// section delivers: the brokers' backlogs and the core NATS feed are made
// of it and the Benthos case generates it, so every party sends the sink
// the same bytes.
package backlog

import (
	"bytes"
	"fmt"
)

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
