package webhook_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/webhook"
)

// A receiver verifies each request over its raw body before acting on it,
// and drops duplicates by webhook-id. The secret is the one in the sink's
// signing.secret, from the environment in real code.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := webhook.New(webhook.Config{Secret: secret}) // Standard scheme
	if err != nil {
		panic(err)
	}

	handler := func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		err = verifier.Verify(r.Header, body, 5*time.Minute, time.Now())
		switch {
		case errors.Is(err, webhook.ErrStaleSignature):
			http.Error(w, "stale signature", http.StatusUnauthorized) // 401: shaper dead-letters, never retries
			return
		case err != nil:
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Here: drop the request if r.Header.Get("webhook-id") was seen
		// within the tolerance, else act on body.
		w.WriteHeader(http.StatusNoContent)
	}

	// What shaper's HTTP sink sends, signed with the same secret.
	signer, _ := webhook.New(webhook.Config{Secret: secret})
	send := func(id, body string, at time.Time) int {
		r := httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(body))
		_ = signer.Sign(r.Header, id, at, []byte(body))
		w := httptest.NewRecorder()
		handler(w, r)
		return w.Code
	}
	now := time.Now()
	fmt.Println("signed:", send("psp.callbacks/3/1234", `{"payment":42}`, now))

	tampered := httptest.NewRequest(http.MethodPost, "/notify", strings.NewReader(`{"payment":4200}`))
	_ = signer.Sign(tampered.Header, "psp.callbacks/3/1234", now, []byte(`{"payment":42}`))
	w := httptest.NewRecorder()
	handler(w, tampered)
	fmt.Println("tampered:", w.Code)

	fmt.Println("an hour old:", send("psp.callbacks/3/1234", `{"payment":42}`, now.Add(-time.Hour)))
	// Output:
	// signed: 204
	// tampered: 401
	// an hour old: 401
}
