package config

import (
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/sinks"
)

// problemsOf parses src with vars for the environment and returns its error
// text, failing the test when it parses.
func problemsOf(t *testing.T, src string, vars map[string]string) string {
	t.Helper()
	_, err := Parse([]byte(src), env(vars))
	if err == nil {
		t.Fatalf("Parse = nil; want an error:\n%s", src)
	}
	return err.Error()
}

// checkParseErr checks err, what Parse returned for the config that what
// describes: nil when want is empty, else an error that contains want.
func checkParseErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("Parse(%s) = %v; want nil", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("Parse(%s) = %v; want %q", what, err, want)
	}
}

func TestValidateRequiresAnAdminTokenOffLoopback(t *testing.T) {
	tests := []struct {
		listen string
		want   string // "" when no token is needed
	}{
		{"127.0.0.1:9090", ""},
		{"127.1.2.3:9090", ""},
		{"[::1]:9090", ""},
		{"localhost:9090", ""},
		{"LocalHost:9090", ""},
		{"[::ffff:127.0.0.1]:9090", ""},
		{":9090", `admin.token: required: admin.listen ":9090" listens on every interface`},
		{"0.0.0.0:9090", `admin.token: required: admin.listen "0.0.0.0:9090" listens on every interface`},
		{"[::]:9090", `admin.token: required: admin.listen "[::]:9090" listens on every interface`},
		{"10.0.0.5:9090", `admin.token: required: admin.listen host "10.0.0.5" is not a loopback address`},
		{"128.0.0.1:9090", `admin.token: required: admin.listen host "128.0.0.1" is not a loopback address`},
		{"shaper.internal:9090", `admin.token: required: admin.listen host "shaper.internal" is not a loopback address`},
		{"localhost.evil.example:9090", `admin.token: required: admin.listen host "localhost.evil.example"`},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			src := minimal + "admin: {listen: '" + tt.listen + "'}\n"
			_, err := Parse([]byte(src), env(nil))
			checkParseErr(t, "listen "+tt.listen+", no token", err, tt.want)
			if tt.want != "" && err != nil && !strings.Contains(err.Error(), "PUT /v1/pipelines/{name}/rate") {
				t.Errorf("error %q does not say why a token is needed", err)
			}
			withToken := minimal + "admin: {listen: '" + tt.listen + "', token: '${TOKEN}'}\n"
			if _, err := Parse([]byte(withToken), env(map[string]string{"TOKEN": "t0ken-value-0123456"})); err != nil {
				t.Errorf("Parse(listen %s, with a token) = %v; want nil", tt.listen, err)
			}
		})
	}
}

func TestValidateNeverEchoesCredentialsInURLsAndAddresses(t *testing.T) {
	const secret = "Sup3rSecretCredential"
	httpSink := func(url string) string {
		return strings.Replace(minimal, `"https://psp.example.com/notify"`, "'"+url+"'", 1)
	}
	natsSource := func(url string) string {
		return strings.Replace(minimal, "nats://127.0.0.1:4222", "'"+url+"'", 1)
	}
	redis := func(addr string) string {
		return strings.Replace(minimal, "{limit: 50}", "{limit: 50, shared: {redis: {addr: '"+addr+"'}, fallback_limit: 5}}", 1)
	}
	tests := []struct {
		name string
		src  string
		want string
	}{
		{"sink with another scheme", httpSink("ftp://user:" + secret + "@host/hook/" + secret + "?token=" + secret), `pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got scheme "ftp"`},
		{"sink without a scheme", httpSink(secret + ".example.com/hook"), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got one without a scheme"},
		{"sink without a host", httpSink("https://" + secret + "@/hook"), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got one without a host"},
		{"sink with a port that does not parse", httpSink("https://user:pa/" + secret + "@host/hook"), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL: it does not parse"},
		{"sink with a bad escape", httpSink("https://host/%z" + secret), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL: it does not parse"},
		{"sink with a control character", httpSink("https://host/" + secret + "\t"), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL: net/url: invalid control character in URL"},
		{"sink with a credential for a scheme", httpSink(secret + "://host/"), "pipelines[0].sink.http.url: want an absolute http:// or https:// URL, got scheme of 21 characters"},
		{"nats token without a host", natsSource("nats://" + secret + "@"), "pipelines[0].source.nats.url: want nats://host:port, got one without a host"},
		{"nats password with another scheme", natsSource("nats://127.0.0.1:4222,http://u:" + secret + "@h:4222"), "pipelines[0].source.nats.url: want scheme nats, tls, ws or wss (URL 2 of 2), got \"http\""},
		{"redis url in addr", redis("redis://:" + secret + "@cache:6379"), "pipelines[0].rate.shared.redis.addr: want host:port, got a URL or user information"},
		{"redis user information in addr", redis("default:" + secret + "@cache:6379"), "pipelines[0].rate.shared.redis.addr: want host:port, got a URL or user information"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemsOf(t, tt.src, nil)
			if !strings.Contains(got, tt.want) {
				t.Errorf("Parse = %v; want %q", got, tt.want)
			}
			if strings.Contains(got, secret[:8]) {
				t.Errorf("Parse = %v; it shows the credential", got)
			}
		})
	}
}

func TestValidateSigningNeedsALongSecretAndAFreeHeader(t *testing.T) {
	signing := func(body string) string {
		return strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`,
			`{url: "https://psp.example.com/notify", headers: {X-Taken: v}, key_header: X-Key, signing: `+body+`}`, 1)
	}
	vars := map[string]string{
		"LONG":    "0123456789abcdef",
		"SHORT":   "0123456789abcde",
		"WHSEC":   "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", // 32 bytes
		"WHBAD":   "whsec_0123456789abcdef-not-base64",
		"WHSHORT": "whsec_MDEyMzQ1Njc4OWFiY2Rl", // 15 bytes
	}
	tests := []struct {
		name       string
		body       string
		want       string // "" when valid
		wantScheme string // when valid
		wantHeader string // when valid
	}{
		{"16 bytes from the environment", "{secret: '${LONG}'}", "", "standard", ""},
		{"whsec_ key", "{secret: '${WHSEC}'}", "", "standard", ""},
		{"standard named", "{scheme: standard, secret: '${LONG}'}", "", "standard", ""},
		{"shaper with the default header", "{scheme: shaper, secret: '${LONG}'}", "", "shaper", sinks.DefaultSigningHeader},
		{"shaper with a custom header", "{scheme: shaper, secret: '${LONG}', header: X-Signature}", "", "shaper", "X-Signature"},
		{"no secret", "{scheme: shaper, header: X-Signature}", "pipelines[0].sink.http.signing.secret: required", "", ""},
		{"15 bytes", "{secret: '${SHORT}'}", "pipelines[0].sink.http.signing.secret: must be at least 16 bytes, got 15", "", ""},
		{"whsec_ not base64", "{secret: '${WHBAD}'}", "pipelines[0].sink.http.signing.secret: what follows whsec_ is not standard base64 with padding", "", ""},
		{"whsec_ key of 15 bytes", "{secret: '${WHSHORT}'}", "pipelines[0].sink.http.signing.secret: whsec_ key must be at least 16 bytes once decoded, got 15", "", ""},
		{"unknown scheme", "{scheme: stripe, secret: '${LONG}'}", `pipelines[0].sink.http.signing.scheme: want standard or shaper, got "stripe"`, "", ""},
		{"header with the standard scheme", "{secret: '${LONG}', header: X-Signature}", "pipelines[0].sink.http.signing.header: only with scheme: shaper", "", ""},
		{"header is Idempotency-Key", "{scheme: shaper, secret: '${LONG}', header: idempotency-key}", "pipelines[0].sink.http.signing.header: Idempotency-Key is set by shaper", "", ""},
		{"header also in headers", "{scheme: shaper, secret: '${LONG}', header: x-taken}", `pipelines[0].sink.http.signing.header: "x-taken" is also set in headers`, "", ""},
		{"header is the key header", "{scheme: shaper, secret: '${LONG}', header: X-Key}", `pipelines[0].sink.http.signing.header: "X-Key" is also the key_header`, "", ""},
		{"header name invalid", "{scheme: shaper, secret: '${LONG}', header: 'X Sig'}", `pipelines[0].sink.http.signing.header: invalid header name "X Sig"`, "", ""},
		{"unknown key", "{secret: '${LONG}', algorithm: sha1}", "pipelines[0].sink.http.signing.algorithm: unknown key", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(signing(tt.body)), env(vars))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse = %v; want nil", err)
			case tt.want == "":
				if s := cfg.Pipelines[0].Sink.HTTP.Signing; s.Scheme != tt.wantScheme || s.Header != tt.wantHeader || s.Secret == "" {
					t.Errorf("signing = scheme %q, header %q, secret of %d bytes; want %q, %q and the secret", s.Scheme, s.Header, len(s.Secret), tt.wantScheme, tt.wantHeader)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("Parse = %v; want %q", err, tt.want)
			case strings.Contains(err.Error(), "0123456789") || strings.Contains(err.Error(), "MDEyMzQ1"):
				t.Errorf("Parse = %v; it shows the secret", err)
			}
		})
	}
}

func TestValidateStandardSigningKeepsItsHeadersFree(t *testing.T) {
	sink := func(extra string) string {
		return strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`,
			`{url: "https://psp.example.com/notify", signing: {secret: 0123456789abcdef-secret}, `+extra+`}`, 1)
	}
	tests := []struct {
		name, extra, want string
	}{
		{"webhook-id in headers", "headers: {webhook-id: x}", "pipelines[0].sink.http.headers.webhook-id: is set by signing (scheme standard)"},
		{"Webhook-Signature in headers", "headers: {Webhook-Signature: x}", "pipelines[0].sink.http.headers.Webhook-Signature: is set by signing (scheme standard)"},
		{"key_header webhook-timestamp", "key_header: webhook-timestamp", `pipelines[0].sink.http.key_header: "webhook-timestamp" is set by signing (scheme standard)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := problemsOf(t, sink(tt.extra), nil); !strings.Contains(got, tt.want) {
				t.Errorf("Parse = %v; want %q", got, tt.want)
			}
		})
	}
}

func TestValidateProxyWithoutShowingIt(t *testing.T) {
	const password = "Pr0xyPassw0rdSecret"
	proxy := func(p string) string {
		return strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`, `{url: "https://psp.example.com/notify", proxy: '`+p+`'}`, 1)
	}
	tests := []struct {
		proxy string
		want  string // "" when valid
	}{
		{"", ""},
		{"environment", ""},
		{"http://proxy.example:3128", ""},
		{"https://u:" + password + "@proxy.example:3129", ""},
		{"socks5://127.0.0.1:1080", ""},
		{"socks5h://proxy.example", ""},
		{"http://proxy.example:3128/", ""},
		{"Environment", `pipelines[0].sink.http.proxy: want "environment" or a proxy URL such as http://proxy.example:3128 (scheme http, https, socks5 or socks5h), got one without a scheme`},
		{"ftp://u:" + password + "@proxy.example", `pipelines[0].sink.http.proxy: want "environment" or a proxy URL such as http://proxy.example:3128 (scheme http, https, socks5 or socks5h), got scheme "ftp"`},
		{"proxy.example:3128", "got one without // after the scheme (host:port alone? write http://host:port)"},
		{"127.0.0.1:3128", "sink.http.proxy: want \"environment\" or a proxy URL"},
		{"http://u:" + password + "@", "sink.http.proxy: want \"environment\" or a proxy URL such as http://proxy.example:3128 (scheme http, https, socks5 or socks5h), got one without a host"},
		{"http://u:" + password + "@proxy.example/path", "got one with a path, query or fragment"},
		{password + "://proxy.example", "got scheme of 19 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.proxy, func(t *testing.T) {
			_, err := Parse([]byte(proxy(tt.proxy)), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Parse(proxy %q) = %v; want nil", tt.proxy, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Parse(proxy %q) = %v; want %q", tt.proxy, err, tt.want)
			case err != nil && strings.Contains(err.Error(), password[:8]):
				t.Errorf("Parse = %v; it shows the proxy password", err)
			}
		})
	}
}

func TestValidateTLSMinVersionAndHTTPSinkTLS(t *testing.T) {
	sinkTLS := func(url, tls string) string {
		return strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`, `{url: "`+url+`", tls: `+tls+`}`, 1)
	}
	tests := []struct {
		name string
		src  string
		want string // "" when valid
	}{
		{"empty tls on https", sinkTLS("https://psp.example.com/notify", "{}"), ""},
		{"min_version 1.3", sinkTLS("https://psp.example.com/notify", "{min_version: '1.3'}"), ""},
		{"min_version 1.2 unquoted", sinkTLS("https://psp.example.com/notify", "{min_version: 1.2}"), ""},
		{"min_version 1.1", sinkTLS("https://psp.example.com/notify", "{min_version: '1.1'}"), `pipelines[0].sink.http.tls.min_version: want "1.2" or "1.3", got "1.1"`},
		{"tls on http", sinkTLS("http://psp.example.com/notify", "{}"), "pipelines[0].sink.http.tls: needs an https:// url"},
		{"cert without key", sinkTLS("https://psp.example.com/notify", "{cert_file: /etc/hostname}"), "pipelines[0].sink.http.tls: cert_file and key_file go together"},
		{"redis min_version", strings.Replace(minimal, "{limit: 50}", "{limit: 50, shared: {redis: {addr: 'cache:6379', tls: {min_version: TLS1.3}}, fallback_limit: 5}}", 1),
			`pipelines[0].rate.shared.redis.tls.min_version: want "1.2" or "1.3", got "TLS1.3"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tt.src), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Parse = %v; want nil", err)
			case tt.want == "":
				if got := cfg.Pipelines[0].Sink.HTTP.TLS.MinVersion; got == "" {
					t.Errorf("tls.min_version = %q; want a default", got)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("Parse = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestParseBlanksEnvironmentValuesOutOfValidationErrors(t *testing.T) {
	const secret = "leaked.value-from-env"
	src := strings.NewReplacer(
		"name: psp", "name: '${NAME}'",
		"subject: callbacks.psp", "subject: '${SUBJECT}'",
		"{limit: 50}", "{limit: 50, mode: '${MODE}'}",
	).Replace(minimal) + `
  - name: '${NAME}'
    source:
      kafka: {brokers: ['${BROKER}'], topic: '${TOPIC}', group: g}
    rate: {limit: 5}
    sink: {http: {url: "https://psp.example.com/notify"}}
`
	got := problemsOf(t, src, map[string]string{
		"NAME":    "bad name " + secret, // invalid, duplicate, and the default durable
		"SUBJECT": "callbacks psp",      // short: blanked at its own key path only
		"MODE":    "sliding",
		"BROKER":  secret,
		"TOPIC":   secret + "/topic",
	})
	for _, want := range []string{
		"pipelines[0].name: want letters, digits, '-', '_' or '.', got (a value from the environment)",
		"pipelines[0].source.nats.subject: must not contain whitespace, got (a value from the environment)",
		"pipelines[0].source.nats.durable: must not contain whitespace",
		"pipelines[0].rate.mode: want leaky or token, got (a value from the environment)",
		"pipelines[1].name: (a value from the environment) is already the name of pipelines[0]",
		"pipelines[1].source.kafka.brokers[0]: want host:port",
		"pipelines[1].source.kafka.topic: want 1 to 249",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	for _, value := range []string{secret, "sliding", "callbacks psp", "bad name"} {
		if strings.Contains(got, value) {
			t.Errorf("errors show the environment value %q:\n%s", value, got)
		}
	}
}

func TestKeyPathsQuoteKeysThatAreNotPlain(t *testing.T) {
	src := strings.Replace(minimal, `{url: "https://psp.example.com/notify"}`,
		`{url: "https://psp.example.com/notify", headers: {"X.Dotted": "a\nb", "Bad Name": v, "Idempotency-Key": v}}`, 1)
	if got, want := problemsOf(t, src+"\"odd\\nkey\": 1\n", nil), `["odd\nkey"]: unknown key`; !strings.Contains(got, want) {
		t.Errorf("errors lack %q:\n%s", want, got)
	}
	got := problemsOf(t, src, nil)
	for _, want := range []string{
		`pipelines[0].sink.http.headers["X.Dotted"]: value must not contain control characters (CR, LF, NUL...)`,
		`pipelines[0].sink.http.headers["Bad Name"]: invalid header name`,
		`pipelines[0].sink.http.headers.Idempotency-Key: is set by shaper`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"localhost", true}, {"LOCALHOST", true}, {"127.0.0.1", true}, {"127.255.255.254", true},
		{"::1", true}, {"::ffff:127.0.0.1", true}, {"::1%lo", true},
		{"", false}, {"0.0.0.0", false}, {"::", false}, {"10.1.2.3", false}, {"128.0.0.1", false},
		{"::2", false}, {"localhost.", false}, {"my-localhost", false}, {"example.com", false},
	}
	for _, tt := range tests {
		if got := check.IsLoopback(tt.give); got != tt.want {
			t.Errorf("check.IsLoopback(%q) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

func TestSensitiveHeader(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"Authorization", true}, {"proxy-authorization", true}, {"Cookie", true}, {"Set-Cookie", true},
		{"X-Api-Key", true}, {"X-Auth-Token", true}, {"X-Client-Secret", true}, {"X-PASSWORD", true},
		{"Shaper-Signature", true}, {"X-Session-Id", true}, {"X-Credentials", true},
		{"Content-Type", false}, {"Accept", false}, {"User-Agent", false}, {"Traceparent", false}, {"X-Request-Id", false},
	}
	for _, tt := range tests {
		if got := sinks.SensitiveHeader(tt.give); got != tt.want {
			t.Errorf("sinks.SensitiveHeader(%q) = %v; want %v", tt.give, got, tt.want)
		}
	}
}

// Without admin.token the admin API is read-only (its changes answer 403),
// and what validate and the editor hover say of the token is that, not
// that anyone could change the rate.
func TestTheTokenIsDescribedAsWhatItIs(t *testing.T) {
	got := problemsOf(t, minimal+"admin: {listen: '0.0.0.0:9090'}\n", nil)
	comment := schemaComments["github.com/shaper-dev/shaper/config.AdminConfig.Token"]
	for what, text := range map[string]string{"the validate error": got, "AdminConfig.Token's comment": comment} {
		if strings.Contains(text, "change the rate") {
			t.Errorf("%s says a missing token lets anyone change the rate: %q", what, text)
		}
		if !strings.Contains(text, "read-only") || !strings.Contains(text, "403") {
			t.Errorf("%s does not say that without a token the admin API is read-only (403): %q", what, text)
		}
	}
}

// pushback.scope is destination (the default) or key, which needs key:;
// per_key_capacity defaults to a quarter of the capacity where there are
// lanes (key: or url_from) and the source can take messages back, else
// to the capacity.
func TestValidatePushbackScopeAndThePerKeyCapacityDefault(t *testing.T) {
	const urlFrom = `{url_from: "header:Notify-Url", allowed_hosts: [psp.example.com]}`
	tests := []struct {
		name, extra, sink, source string
		want                      string // "" when valid
		wantPerKey                int
	}{
		{"no lanes", "", "", "", "", 1000},
		{"key on JetStream", "    key: {from: header:Merchant}\n", "", "", "", 250},
		{"url_from on JetStream", "", urlFrom, "", "", 250},
		{"url_from on core NATS", "", urlFrom, "nats: {url: nats://127.0.0.1:4222, subject: callbacks.psp}", "", 1000},
		{"ordered key on JetStream", "    key: {from: header:Merchant, ordered: true}\n", "", "", "", 1000},
		{"scope key", "    key: {from: header:Merchant}\n    pushback: {scope: key}\n", "", "", "", 250},
		{"scope destination", "    pushback: {scope: destination}\n", "", "", "", 1000},
		{"scope key without key", "    pushback: {scope: key}\n", "", "", "pipelines[0].pushback.scope: key needs key:", 0},
		{"unknown scope", "    pushback: {scope: host}\n", "", "", `pipelines[0].pushback.scope: want destination or key, got "host"`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := minimal + tt.extra
			if tt.sink != "" {
				doc = strings.Replace(doc, `{url: "https://psp.example.com/notify"}`, tt.sink, 1)
			}
			if tt.source != "" {
				doc = strings.Replace(doc, `nats: {url: nats://127.0.0.1:4222, subject: callbacks.psp, stream: CALLBACKS}`, tt.source, 1)
			}
			cfg, err := Parse([]byte(doc), env(nil))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse = %v; want nil", err)
			case tt.want == "":
				if got := cfg.Pipelines[0].Bucket.PerKeyCapacity; got != tt.wantPerKey {
					t.Errorf("per_key_capacity = %d; want %d", got, tt.wantPerKey)
				}
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Errorf("Parse = %v; want %q", err, tt.want)
			}
		})
	}
}

// A JetStream durable's MaxAckPending is the bucket's capacity for one
// replica, and unbounded where that would starve someone: lanes that hand
// messages back, and a fleet under rate.shared, whose replicas share the
// durable and each fill a bucket of their own.
func TestPendingIsTheCapacityUnlessLanesHandBackOrReplicasShareTheDurable(t *testing.T) {
	tests := []struct {
		name, from, to string
		want           int
	}{
		{"one replica", "", "", 1000},
		{"lanes that hand back", "    rate: {limit: 50}\n", "    rate: {limit: 50}\n    key: {from: header:Merchant}\n", -1},
		{"rate.shared", "{limit: 50}", "{limit: 50, shared: {redis: {addr: 'cache:6379'}, fallback_limit: 5}}", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]byte(strings.Replace(minimal, tt.from, tt.to, 1)), env(nil))
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			if got := cfg.Pipelines[0].Pending(); got != tt.want {
				t.Errorf("Pending() = %d; want %d", got, tt.want)
			}
		})
	}
}
