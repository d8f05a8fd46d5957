package sinks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/webhook"
)

// A sink with signing: {secret: ...} signs every request the Standard
// Webhooks way; the receiver verifies it with package webhook (or any
// Standard Webhooks library) over the raw body.
func ExampleNewHTTP_signing() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // ${SINK_SIGNING_SECRET} in a config
	verifier, _ := webhook.New(webhook.Config{Secret: secret})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := verifier.Verify(r.Header, body, 5*time.Minute, time.Now()); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Printf("verified %s: %s\n", r.Header.Get("webhook-id"), body)
	}))
	defer receiver.Close()

	sink, err := sinks.NewHTTP(sinks.HTTPConfig{
		URL:            receiver.URL,
		Signing:        &sinks.SigningConfig{Secret: secret}, // scheme: standard
		DeliveryConfig: shaper.DeliveryConfig{Timeout: 2 * time.Second, MaxInFlight: 1},
	})
	if err != nil {
		panic(err)
	}
	defer sink.Close(context.Background())
	err = sink.Send(context.Background(), &shaper.Message{ID: "psp.callbacks/3/1234", Payload: []byte(`{"payment":42}`)})
	fmt.Println(err)
	// Output:
	// verified psp.callbacks/3/1234: {"payment":42}
	// <nil>
}
