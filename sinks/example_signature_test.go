package sinks_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/shaper-dev/shaper/sinks"
)

// A receiver checks the Shaper-Signature header of each request over the raw
// body before acting on it.
func ExampleVerifySignature() {
	const secret = "whsec-0123456789abcdef" // from the environment in real code
	body := []byte(`{"payment":42,"status":"settled"}`)
	header := "t=1767225600,v1=b16c904d449f7e0540ab174aee0d4a4957a3e2e8dba4f75885b39b8f702c0713"
	received := time.Unix(1767225600, 0).Add(3 * time.Second)

	fmt.Println(sinks.VerifySignature(header, body, secret, 5*time.Minute, received))

	tampered := []byte(`{"payment":4200,"status":"settled"}`)
	err := sinks.VerifySignature(header, tampered, secret, 5*time.Minute, received)
	fmt.Println(errors.Is(err, sinks.ErrBadSignature))

	replayed := received.Add(time.Hour)
	err = sinks.VerifySignature(header, body, secret, 5*time.Minute, replayed)
	fmt.Println(errors.Is(err, sinks.ErrStaleSignature))
	// Output:
	// <nil>
	// true
	// true
}
