// This file is the HTTP sink's glue to package webhook, which holds the
// signature formats and the verifier: the signing setting, the signature of
// each attempt, and what of it an error may not quote.

package sinks

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/webhook"
)

// setSigning makes the signer of a validated signing setting (nil: none)
// and adds the secret to the secrets.
func (h *httpSink) setSigning(sc *SigningConfig) error {
	if sc == nil {
		return nil
	}
	// webhook's errors never show the secret.
	signer, err := webhook.New(webhook.Config{Scheme: webhook.Scheme(sc.Scheme), Secret: sc.Secret, Header: sc.Header})
	if err != nil {
		return fmt.Errorf("http: signing: %w", err)
	}
	h.signer, h.signHeaders = signer, signer.Headers()
	h.addSecrets(sc.Secret)
	if b64, ok := strings.CutPrefix(sc.Secret, webhook.SecretPrefix); ok {
		h.addSecrets(b64) // a receiver may echo the key without its prefix
	}
	return nil
}

// sign sets the signature headers of m, made now, in header and returns the
// signature ("" when not signing). A message the scheme cannot sign (no id
// under Standard Webhooks) is shaper.ErrMalformed.
func (h *httpSink) sign(header http.Header, m *shaper.Message) (string, error) {
	if h.signer == nil {
		return "", nil
	}
	if err := h.signer.Sign(header, m.ID, h.now(), m.Payload); err != nil {
		return "", fmt.Errorf("http: sign: %w: %w", err, shaper.ErrMalformed)
	}
	return header.Get(h.signer.SignatureHeader()), nil
}

// signatureSecrets returns what of a signature sig to blank out of a quoted
// response body: it is no key, but could be replayed within the receiver's
// tolerance. The value first, then the MAC alone ("v1,<base64>" or
// "t=...,v2=<hex>"), which a receiver may echo without its prefix.
func signatureSecrets(sig string) [][]byte {
	_, mac, ok := strings.Cut(sig, "v1,")
	if !ok {
		_, mac, _ = strings.Cut(sig, ",v2=")
	}
	return [][]byte{[]byte(sig), []byte(mac)}
}
