package sinks

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/shaper"
)

// sinkHost is the test-only name the sink is addressed by. Go's proxy
// functions never proxy a loopback host, so the proxy tests need a name
// that is not one; loopbackDialer maps it to 127.0.0.1.
const sinkHost = "sink.test"

// loopbackDialer dials for an HTTP sink under test: sinkHost goes to
// 127.0.0.1, a loopback address to itself, and anything else is refused
// and recorded, so no test reaches outside the machine or looks a name
// up, even when the code under test is wrong.
type loopbackDialer struct {
	mu      sync.Mutex
	dials   []string // every address asked for
	refused []string // those refused
}

func (d *loopbackDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dials = append(d.dials, addr)
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == sinkHost {
		addr = net.JoinHostPort("127.0.0.1", port)
	} else if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		d.refused = append(d.refused, addr)
		return nil, fmt.Errorf("test dialer: %s is not loopback: refused", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *loopbackDialer) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dials...)
}

func (d *loopbackDialer) refusedAny(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.refused) > 0 {
		t.Errorf("the sink dialled %v, outside loopback", d.refused)
	}
}

// requestURIs returns the request targets s got, in order (a proxy gets
// absolute ones: http://sink.test:port/hook).
func requestURIs(s *sinktest.Sink) []string {
	var out []string
	for _, r := range s.Requests() {
		out = append(out, r.URI)
	}
	return out
}

// port returns the port s listens on.
func port(s *sinktest.Sink) string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

// clearProxyEnv empties every variable Go's proxy functions read, for the
// test, so the machine's own settings play no part.
func clearProxyEnv(t *testing.T) {
	for _, name := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"} {
		t.Setenv(name, "")
	}
}

// proxySink returns an HTTP sink dialling through d, first proving on a
// loopback URL that d is the dialer in use (so that no later request to
// sinkHost can reach a real resolver), then switched to cfg.
func proxySink(t *testing.T, d *loopbackDialer, cfg HTTPConfig) *HTTP {
	t.Helper()
	probe := sinktest.Start(t, sinktest.OK)
	h, err := newHTTPDialing(httpConfig("http://"+probe.Addr), d.dial, nil)
	if err != nil {
		t.Fatalf("newHTTPDialing: %v", err)
	}
	closeAtEnd(t, h)
	sendHTTP(t, h, &shaper.Message{ID: "probe", Payload: []byte("{}")})
	if dials := d.dialed(); len(dials) == 0 || dials[len(dials)-1] != probe.Addr {
		t.Fatalf("the sink did not dial through the test dialer (dials %v); stopping before it names %s", dials, sinkHost)
	}
	if err := h.Reconfigure(cfg); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	return h
}

func TestHTTPProxyIsUsedOnlyWhenConfigured(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string // besides the cleared proxy variables; "ENV" is the environment's proxy
		proxy     string            // sink.http.proxy; "EXPLICIT" is the configured proxy
		wantVia   string            // "sink", "env" or "explicit": who gets the request
		wantProxy string            // what Proxy() reports; "EXPLICIT"/"ENV" stand for the proxies' URLs
	}{
		{"HTTP_PROXY set, no proxy key: direct", map[string]string{"HTTP_PROXY": "ENV", "HTTPS_PROXY": "ENV"}, "", "sink", "none"},
		{"lower-case http_proxy set, no proxy key: direct", map[string]string{"http_proxy": "ENV"}, "", "sink", "none"},
		{"proxy URL: through it, not the environment's", map[string]string{"HTTP_PROXY": "ENV"}, "EXPLICIT", "explicit", "EXPLICIT"},
		{"proxy URL with no environment", nil, "EXPLICIT", "explicit", "EXPLICIT"},
		{"environment: HTTP_PROXY", map[string]string{"HTTP_PROXY": "ENV"}, "environment", "env", "environment: ENV"},
		{"environment: host:port without a scheme", map[string]string{"http_proxy": "HOSTPORT"}, "environment", "env", "environment: ENV"},
		{"environment: NO_PROXY names the sink", map[string]string{"HTTP_PROXY": "ENV", "NO_PROXY": "example.com," + sinkHost}, "environment", "sink", "environment: none for this url"},
		{"environment: only HTTPS_PROXY, an http sink", map[string]string{"HTTPS_PROXY": "ENV"}, "environment", "sink", "environment: none for this url"},
		{"environment: nothing set", nil, "environment", "sink", "environment: none for this url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink, env, explicit := sinktest.Start(t, sinktest.OK), sinktest.Start(t, sinktest.OK), sinktest.Start(t, sinktest.OK)
			envURL, explicitURL := "http://"+env.Addr, "http://"+explicit.Addr // http://127.0.0.1:port
			clearProxyEnv(t)
			for k, v := range tt.env {
				v = strings.NewReplacer("HOSTPORT", strings.TrimPrefix(envURL, "http://"), "ENV", envURL).Replace(v)
				t.Setenv(k, v)
			}
			d := &loopbackDialer{}
			cfg := httpConfig("http://" + net.JoinHostPort(sinkHost, port(sink)) + "/hook")
			cfg.Proxy = strings.Replace(tt.proxy, "EXPLICIT", explicitURL, 1)
			h := proxySink(t, d, cfg)

			sendHTTP(t, h, &shaper.Message{ID: "1", Payload: []byte(`{"payment":42}`)})

			want := map[string][]string{"sink": nil, "env": nil, "explicit": nil}
			if tt.wantVia == "sink" {
				want["sink"] = []string{"/hook"}
			} else {
				want[tt.wantVia] = []string{cfg.URL} // a proxy gets the absolute URI
			}
			for name, r := range map[string]*sinktest.Sink{"sink": sink, "env": env, "explicit": explicit} {
				if got := requestURIs(r); strings.Join(got, " ") != strings.Join(want[name], " ") {
					t.Errorf("%s got requests %q; want %q", name, got, want[name])
				}
			}
			wantProxy := strings.NewReplacer("EXPLICIT", explicitURL, "ENV", envURL).Replace(tt.wantProxy)
			if got := h.Proxy(); got != wantProxy {
				t.Errorf("Proxy() = %q; want %q", got, wantProxy)
			}
			d.refusedAny(t)
		})
	}
}

func TestHTTPProxyCredentialsAuthenticateButAreNeverShown(t *testing.T) {
	const user, password = "shaper-proxy-user", "proxy-password-31415926"
	clearProxyEnv(t)
	sink, proxy := sinktest.Start(t, sinktest.OK), sinktest.Start(t, sinktest.OK)
	d := &loopbackDialer{}
	cfg := httpConfig("http://" + net.JoinHostPort(sinkHost, port(sink)) + "/hook")
	cfg.Proxy = strings.Replace("http://"+proxy.Addr, "http://", "http://"+user+":"+password+"@", 1)
	h := proxySink(t, d, cfg)
	sendHTTP(t, h, &shaper.Message{ID: "1", Payload: []byte("{}")})

	if got := requestURIs(proxy); len(got) != 1 {
		t.Fatalf("proxy got %q; want one request", got)
	}
	want := "Basic " + basicAuth(user, password)
	if proxy.Requests()[0].Header.Get("Proxy-Authorization") != want {
		t.Errorf("Proxy-Authorization = %q; want %q", proxy.Requests()[0].Header.Get("Proxy-Authorization"), want)
	}
	if got := h.Proxy(); got != "http://"+proxy.Addr || strings.Contains(got, password) || strings.Contains(got, user) {
		t.Errorf("Proxy() = %q; want %q, without user information", got, "http://"+proxy.Addr)
	}
	d.refusedAny(t)
}

func basicAuth(user, password string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestHTTPReconfigureAppliesTheProxyRule: a reload chooses the proxy as
// startup does, and "environment" reads the environment at the reload.
func TestHTTPReconfigureAppliesTheProxyRule(t *testing.T) {
	clearProxyEnv(t)
	sink, env := sinktest.Start(t, sinktest.OK), sinktest.Start(t, sinktest.OK)
	t.Setenv("HTTP_PROXY", "http://"+env.Addr)
	d := &loopbackDialer{}
	direct := httpConfig("http://" + net.JoinHostPort(sinkHost, port(sink)) + "/hook")
	h := proxySink(t, d, direct)

	viaEnv := direct
	viaEnv.Proxy = ProxyEnvironment
	steps := []struct {
		name      string
		cfg       HTTPConfig
		setEnv    string // HTTP_PROXY before the reload; "-" leaves it
		wantSink  int    // requests the sink has seen after this step
		wantProxy int
	}{
		{"started without proxy", direct, "-", 1, 0},
		{"reloaded to environment", viaEnv, "-", 1, 1},
		{"reloaded without proxy", direct, "-", 2, 1},
		{"environment emptied, reloaded to environment", viaEnv, "", 3, 1},
	}
	for i, st := range steps {
		if st.setEnv != "-" {
			t.Setenv("HTTP_PROXY", st.setEnv)
		}
		if i > 0 {
			if err := h.Reconfigure(st.cfg); err != nil {
				t.Fatalf("%s: Reconfigure = %v", st.name, err)
			}
		}
		sendHTTP(t, h, &shaper.Message{ID: fmt.Sprint(i), Payload: []byte("{}")})
		if s, p := len(requestURIs(sink)), len(requestURIs(env)); s != st.wantSink || p != st.wantProxy {
			t.Errorf("%s: sink saw %d, proxy %d requests; want %d, %d", st.name, s, p, st.wantSink, st.wantProxy)
		}
	}
	d.refusedAny(t)
}

func TestNewHTTPRefusesABadProxyWithoutShowingIt(t *testing.T) {
	const password = "proxy-password-27182818"
	tests := []string{
		"ftp://u:" + password + "@proxy.example:21",
		"http://u:" + password + "@",
		"http://u:" + password + "@proxy.example:3128/%zz",
	}
	for _, proxy := range tests {
		cfg := httpConfig("https://example.com/hook")
		cfg.Proxy = proxy
		h, err := NewHTTP(cfg)
		if err == nil {
			h.Close(context.Background())
			t.Errorf("NewHTTP(proxy %q) = nil error; want one", proxy)
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("NewHTTP = %q; it shows the proxy password", err)
		}
	}
}
