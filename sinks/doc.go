// Package sinks is where a pipeline's messages go: an HTTP endpoint ([HTTP]),
// a Kafka topic ([Kafka]) or a NATS subject ([NATS]). The Kafka and NATS
// publishers also serve as the dead-letter target.
//
// Each sink implements [shaper.Sink]. Send makes exactly one attempt and
// never retries on its own: backoff, retries and the rate belong to the core.
// What Send returns is what the core's retry policy classifies, and what it
// derives the code label of shaper_requests_total from
// ([shaper.RequestCode]):
//
//   - success: nil (label "ok");
//   - a [*shaper.StatusError]: the sink answered with a non-2xx status. It
//     carries the code (the label), the time asked for by a Retry-After
//     header and a short, single-line excerpt of the body. The policy retries
//     408, 425, 429, 500, 502, 503 and 504 and dead-letters every other
//     status as "rejected";
//   - an error wrapping [shaper.ErrMalformed]: the message can never become a
//     request (larger than the sink or the broker accepts, an id or key that
//     is not a valid header value). It is also marked [shaper.NotSent] when
//     no request was made (no label, not counted); when the broker refused
//     it, the label is "error". The message is dead-lettered as "malformed"
//     at once;
//   - any other error: the network, a timeout, a broker that is down, a
//     Kafka topic that does not exist (yet). The label is "error" and the
//     attempt is retried.
//
// All sinks are safe for concurrent use by the pipeline's workers.
//
// # Keys and headers
//
// A message carries its broker's key and headers ([shaper.Message] Key and
// Header): a Kafka source fills both from the record, a NATS source fills
// Header from the NATS headers and has no key. The core adds the dead-letter
// headers Shaper-Reason, Shaper-Error, Shaper-Attempts, Shaper-Pipeline,
// Shaper-Source and Shaper-Id to a dead letter's Header.
//
// The Kafka and NATS publishers pass them on as they are. [Kafka] writes the
// key as the record key (which also picks the partition) and every value of
// every header as one record header, case kept: values of one name in their
// order, names in sorted order (Header is a map, so the order of different
// names in the original record is gone). [NATS] sends Header as the NATS
// headers and has nowhere to put a key.
//
// [HTTP] sends neither unless its config asks:
//
//   - forward_headers: true sends each message header as an HTTP header of the
//     same name, whether it came from a Kafka record header or a NATS header:
//     "trace-id: abc" arrives as "Trace-Id: abc". HTTP header names are
//     case-insensitive while Kafka and NATS ones are not, so names that differ
//     only in case become one HTTP header carrying all their values (in the
//     sorted order of the names), and a header repeated in the record is
//     repeated in the request, in order. Spaces and tabs at the ends of a
//     value are trimmed, as an HTTP receiver would. Left out, silently, name
//     by name and value by value: a name that is not an HTTP token (white
//     space, ':', non-ASCII, empty); a value with a control character (CR, LF,
//     NUL, DEL...), so no header can ever inject another; the headers that
//     describe one connection or the framing of one request and not the
//     message (Host, Content-Length, Transfer-Encoding, Connection,
//     Keep-Alive, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization,
//     TE, Trailer, Upgrade, Expect, HTTP2-Settings); Idempotency-Key, which is
//     always the message id; any header named in headers, since the configured
//     value wins; and the key_header. Every other name is forwarded,
//     Authorization and Cookie included: configure the ones a producer must
//     not choose.
//   - key_header: NAME sends the message key (the Kafka record key) as the
//     value of header NAME, over any forwarded header of that name. A
//     message without a key sends no such header. A key that would not
//     arrive unchanged as a header value (a control character, which binary
//     keys usually hold, a tab, or a space at either end) makes the message
//     malformed: it is dead-lettered without a request. NewHTTP refuses a
//     key_header that is Idempotency-Key, one of the connection headers
//     above, or also set in headers.
//
// # Signed requests
//
// With signing: {secret: ${SINK_SIGNING_SECRET}}, [HTTP] signs every
// attempt over the message id, the attempt's time and the body, with
// package [github.com/shaper-dev/shaper/webhook], which holds the formats
// and the verifier. The default scheme is Standard Webhooks
// (https://www.standardwebhooks.com/), which any Standard Webhooks library
// verifies:
//
//	webhook-id: psp.callbacks/3/1234
//	webhook-timestamp: 1767225600
//	webhook-signature: v1,3gscjzCAfpd2N/5uGjUk8v79AUY/jhMM5bHzIFihFD4=
//
// v1 is the base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>",
// webhook-id is the message id (also sent as Idempotency-Key) and the body
// is the message payload, byte for byte. (The value above is that of the
// body {"payment":42,"status":"settled"} under the secret
// whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw.) A secret "whsec_<base64>" is
// the base64 of the key, as Standard Webhooks libraries take it; any other
// secret is the key as it is.
//
// With scheme: shaper, one header (header:, default Shaper-Signature)
// carries the signature, and the id travels in Idempotency-Key:
//
//	Shaper-Signature: t=1767225600,v2=<hex HMAC-SHA256 of "<t>\n<id>\n<body>">
//
// Either way, two messages with the same body sent in the same second carry
// different signatures, a captured request does not verify under another
// Idempotency-Key, and each attempt is signed anew, so a retry after a long
// backoff carries a fresh timestamp. A message header of a signature
// header's name is never forwarded. Signing with the standard scheme needs
// a message id: a message without one is malformed (sources always set one).
//
// Receivers written in Go verify with [webhook.Signer.Verify]:
//
//	verifier, err := webhook.New(webhook.Config{Secret: os.Getenv("SINK_SIGNING_SECRET")})
//	...
//	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err != nil { ... }
//	if err := verifier.Verify(r.Header, body, 5*time.Minute, time.Now()); err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized) // 401 is not retried
//		return
//	}
//
// A request that fails verification should get a 4xx other than 408, 425 or
// 429, so shaper dead-letters it instead of retrying.
//
// # Proxies
//
// [HTTP] uses a proxy only when proxy: names one (http://, https://,
// socks5:// or socks5h://, with user information to authenticate) or says
// environment, which takes HTTPS_PROXY, HTTP_PROXY and NO_PROXY as they are
// when the sink is built (at startup, and again on a reload). Without it,
// proxy variables in the environment are ignored: they would otherwise send
// every callback, its credentials and its signature through whatever they
// name. [HTTP.Proxy] says which proxy is in force; the daemon logs it.
//
// # One request per Send
//
// Every request that reaches the sink took a rate slot. net/http resends a
// request it deems replayable (a GET, or any request with an
// Idempotency-Key) when the kept-alive connection it was written on closes
// before an answer; the sink refuses that resend, so the Send fails with a
// retryable error, and the pipeline's next attempt takes a slot of its own.
// A request of which nothing was written may still be resent at once.
// The sink's own client (below) never resends.
//
// # Two clients
//
// Which client sends is chosen once, when a sink's settings are built. A
// fixed http:// or https:// URL without a proxy goes through the sink's own
// HTTP/1.1 client (package internal/h1): kept-alive connections, each with
// a reader goroutine parked on it, to which a request is written by the
// goroutine that sends it, with no hand-off to net/http's writer and
// reader. Over TLS it uses the sink's tls settings as net/http would, and
// offers only HTTP/1.1. The requests are byte for byte net/http's, the
// answers are judged by the same code (judge); conformance tests hold the
// two to that. A proxy or url_from goes through net/http's Transport
// (HTTP/2 where an https:// server offers it). What the own client saves
// is measured beside the Transport by BenchmarkHTTPAttempt, over http://
// and https:// (docs/tuning.md).
//
// # TLS
//
// With an https:// URL, tls: {ca_file, cert_file, key_file, server_name,
// min_version} sets the CAs to trust instead of the system's, a client
// certificate and key for mutual TLS, the name to check in the server's
// certificate, and the oldest version accepted ("1.2", the default, or
// "1.3"). The server's certificate is always verified. A plain http:// URL
// to a host other than loopback sends headers, signatures and payloads in
// the clear: the daemon warns about it at startup.
//
// # Files
//
// One file a job:
//
//   - http.go: the HTTP sink itself: [NewHTTP], Send, Reconfigure,
//     Proxy and Close, the Transport it sends with, the one request of each
//     Send and how an answer is judged;
//   - http_conn.go: its own HTTP/1.1 client for a fixed URL (package
//     internal/h1), whose connections HTTPConfig.WrapConn wraps (the
//     daemon sets it to the conn knob of internal/tuning: on Linux, an idle daemon's first read does not wake the
//     runtime's sysmon);
//   - http_headers.go: which headers may be sent: the configured headers
//     and key_header it accepts, the broker headers it forwards (never the
//     hop-by-hop, framing or reserved names), valid header names and values;
//   - http_redact.go: credentials kept out of what it reports: secrets
//     blanked out of a response body quoted in a StatusError, which is made
//     printable, and URLs left out of errors;
//   - http_signing.go: the glue to package webhook: the signer of the
//     signing setting and the signature of each attempt;
//   - http_proxy.go: the proxy rule and the resend guard (one request per
//     Send), which share the Transport's Proxy hook;
//   - retry_after.go: [ParseRetryAfter], a Retry-After header in seconds or
//     as an HTTP date;
//   - kafka.go: the Kafka publisher, [Kafka];
//   - nats.go: the NATS publisher, [NATS].
package sinks
