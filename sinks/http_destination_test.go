package sinks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper"
)

// netRecorder stands for the network of a sink under test: it records every
// lookup and dial, answers lookups from names (no DNS), and dials only
// loopback addresses, refusing anything else, so that no test connects
// outside 127.0.0.0/8 and ::1 even when the code under test is wrong.
type netRecorder struct {
	names map[string][]netip.Addr

	mu      sync.Mutex
	lookups []string
	dials   []string
}

func (n *netRecorder) lookup(_ context.Context, _, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	n.lookups = append(n.lookups, host)
	n.mu.Unlock()
	if ips, ok := n.names[host]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
}

func (n *netRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dials = append(n.dials, addr)
	n.mu.Unlock()
	host, _, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		return nil, errors.New("test dialer: refused a non-loopback address " + addr)
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func (n *netRecorder) record() (lookups, dials []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lookups...), append([]string(nil), n.dials...)
}

// urlFromConfig is a sink taking its URL from header Notify-Url.
func urlFromConfig(allowPrivate bool, allowed ...string) HTTPConfig {
	cfg := httpConfig("")
	cfg.URLFrom, cfg.AllowedHosts, cfg.AllowPrivate = "header:Notify-Url", allowed, allowPrivate
	return cfg
}

func notify(id, url string) *shaper.Message {
	return &shaper.Message{ID: id, Header: map[string][]string{"Notify-Url": {url}}, Payload: []byte(`{}`)}
}

// Every hostile URL a message may name is refused before any request:
// never dialled, and a name outside allowed_hosts never even looked up; a
// name inside it that resolves to a private address (DNS rebinding) is
// refused at the dial. Each error says why and is dead-lettered rejected.
func TestHostileURLsAreRefusedWithoutAConnection(t *testing.T) {
	rec := &netRecorder{names: map[string][]netip.Addr{
		"rebind.merchant.example":   {netip.MustParseAddr("127.0.0.1")},
		"metadata.merchant.example": {netip.MustParseAddr("169.254.169.254")},
		"lan.merchant.example":      {netip.MustParseAddr("10.1.2.3")},
		"mapped.merchant.example":   {netip.MustParseAddr("::ffff:192.168.0.1")},
		"half.merchant.example":     {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
	}}
	h, err := newHTTPDialing(urlFromConfig(false, "*.merchant.example", "api.partner.com"), rec.dial, rec.lookup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	hostile := []string{
		"", "not a url", "file:///etc/passwd", "gopher://api.partner.com/", "ftp://api.partner.com/", "javascript:alert(1)",
		"//api.partner.com/notify", "http://api.partner.com/notify", "https://evil.example/", "https://merchant.example/",
		"https://evilmerchant.example/", "https://api.partner.com.evil.example/", "https://api.partner.com@evil.example/",
		"https://evil.example#@api.partner.com", `https://api.partner.com\@evil.example/`, "https://user:pw@api.partner.com/",
		"https://127.0.0.1/", "https://0.0.0.0/", "https://[::1]/", "https://[::]/", "https://[::ffff:127.0.0.1]/",
		"https://2130706433/", "https://0x7f000001/", "https://0x7f.1/", "https://0177.0.0.1/", "https://127.1/",
		"https://017700000001/", "https://169.254.169.254/latest/meta-data/", "https://localhost/", "https://[fe80::1%25eth0]/",
		"https://api.partner.com/a\r\nX-Evil: 1", "https://api.partner.com/\x00", "https://аpi.partner.com/", // Cyrillic а
		"https://api.partner.com/" + strings.Repeat("a", 100<<10),
		"https://rebind.merchant.example/", "https://metadata.merchant.example/", "https://lan.merchant.example/",
		"https://mapped.merchant.example/", "https://half.merchant.example/",
	}
	policy := shaper.NewRetryPolicy(shaper.RetryConfig{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: time.Second, MaxElapsed: time.Hour})
	for _, u := range hostile {
		err := h.Send(context.Background(), notify("m1", u))
		shown := u
		if len(shown) > 60 {
			shown = shown[:60] + "..."
		}
		if !errors.Is(err, shaper.ErrRefused) || !errors.Is(err, shaper.ErrNotSent) {
			t.Errorf("Send to %q = %v; want a refusal (ErrRefused, not sent)", shown, err)
			continue
		}
		if got := policy.Decide(err, 1, time.Now(), time.Now()); got.Retry || got.Reason != shaper.ReasonRejected {
			t.Errorf("%q: decision %+v; want dead-lettered rejected, no retry", shown, got)
		}
		t.Logf("%-45q %v", shown, err)
	}
	lookups, dials := rec.record()
	if len(dials) != 0 {
		t.Errorf("dialled %v; want no connection attempted", dials)
	}
	for _, name := range lookups {
		if !strings.HasSuffix(name, ".merchant.example") {
			t.Errorf("looked up %q, which allowed_hosts does not match; want no lookup", name)
		}
	}
}

// Two real sinks on loopback, allowed with allow_private: each receives
// exactly the messages that name it, and a 302 to a private address is an
// answer, never followed.
func TestEachMessageGoesToTheURLItNames(t *testing.T) {
	got := map[string][]string{}
	var mu sync.Mutex
	servers := map[string]*httptest.Server{}
	for _, name := range []string{"a", "b"} {
		servers[name] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name] = append(got[name], r.Header.Get("Idempotency-Key"))
			mu.Unlock()
			if r.URL.Path == "/redirect" {
				w.Header().Set("Location", "http://169.254.169.254/latest/meta-data/")
				w.WriteHeader(http.StatusFound)
			}
		}))
		t.Cleanup(servers[name].Close)
	}
	rec := &netRecorder{}
	h, err := newHTTPDialing(urlFromConfig(true, "127.0.0.1"), rec.dial, rec.lookup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	want := map[string][]string{}
	for i := range 10 {
		name := []string{"a", "b"}[i%3%2]
		id := name + string(rune('0'+i))
		if err := h.Send(context.Background(), notify(id, servers[name].URL+"/notify")); err != nil {
			t.Fatalf("Send %s: %v", id, err)
		}
		want[name] = append(want[name], id)
	}
	err = h.Send(context.Background(), notify("r", servers["a"].URL+"/redirect"))
	var status *shaper.StatusError
	if !errors.As(err, &status) || status.Code != http.StatusFound {
		t.Errorf("Send to a 302 = %v; want the 302 itself as the answer", err)
	}
	want["a"] = append(want["a"], "r")
	for name, ids := range want {
		if strings.Join(got[name], ",") != strings.Join(ids, ",") {
			t.Errorf("sink %s received %v; want %v", name, got[name], ids)
		}
	}
	if _, dials := rec.record(); len(dials) > 4 {
		t.Errorf("%d connections for 11 requests to 2 hosts: %v; want them kept alive", len(dials), dials)
	}
}

// With url_from, connections to many hosts are kept alive: 300 requests
// round robin over 100 loopback hosts (more than max_in_flight) open 100
// connections, one per host, not one per request.
func TestManyHostsKeepTheirConnections(t *testing.T) {
	const hosts = 100
	var urls []string
	for i := range hosts {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.%d.%d:0", 3+i/250, 1+i%250))
		if err != nil {
			t.Fatal(err)
		}
		s.Listener = l
		s.Start()
		t.Cleanup(s.Close)
		urls = append(urls, s.URL+"/notify")
	}
	rec := &netRecorder{}
	var allowed []string
	for i := range hosts {
		allowed = append(allowed, fmt.Sprintf("127.0.%d.%d", 3+i/250, 1+i%250))
	}
	h, err := newHTTPDialing(urlFromConfig(true, allowed...), rec.dial, rec.lookup)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	for i := range 3 * hosts {
		if err := h.Send(context.Background(), notify(fmt.Sprint(i), urls[i%hosts])); err != nil {
			t.Fatal(err)
		}
	}
	if _, dials := rec.record(); len(dials) != hosts {
		t.Errorf("%d connections for %d requests to %d hosts; want %d, one each, kept alive", len(dials), 3*hosts, hosts, hosts)
	}
}

// Destination names every spelling of one origin the same, so that lanes,
// pauses and breakers cannot be split by how a message writes its URL;
// a URL the guard refuses has no destination. Nothing is dialled.
func TestDestinationIsTheCanonicalOrigin(t *testing.T) {
	fixed := []struct{ give, want string }{
		{"https://PSP.Example.com./notify?token=x", "https://psp.example.com:443"},
		{"http://127.0.0.1/cb", "http://127.0.0.1:80"},
		{"http://127.0.0.1:0080/cb", "http://127.0.0.1:80"},
		{"https://[0:0::1]:8443/", "https://[::1]:8443"},
		{"http://[::ffff:127.0.0.1]:9000/", "http://127.0.0.1:9000"},
	}
	for _, tt := range fixed {
		h := newHTTP(t, httpConfig(tt.give))
		if got := h.Destination(&shaper.Message{}); got != tt.want {
			t.Errorf("url %s: Destination = %q; want %q", tt.give, got, tt.want)
		}
	}

	h := newHTTP(t, urlFromConfig(true, "http://[::1]:18081", "http://127.0.0.1:18081"))
	for _, u := range []string{
		"http://[::1]:18081/a", "http://[0::1]:18081/b", "http://[0:0:0:0:0:0:0:1]:18081/c",
		"http://[::0001]:18081/d", "HTTP://[::1]:18081/e", "http://[0000::1]:18081",
		"http://[0:0::1]:18081/f?x=1", "http://[::0:1]:18081/#g",
	} {
		if got, want := h.Destination(notify("1", u)), "http://[::1]:18081"; got != want {
			t.Errorf("url_from %s: Destination = %q; want %q", u, got, want)
		}
	}
	for _, u := range []string{"", "ftp://[::1]:18081/", "http://[::1]:18082/", "http://10.0.0.1:18081/"} {
		if got := h.Destination(notify("1", u)); got != "" {
			t.Errorf("url_from %q: Destination = %q; want \"\" (refused)", u, got)
		}
	}
	if got := h.Destination(&shaper.Message{ID: "no-url"}); got != "" {
		t.Errorf("a message naming no URL: Destination = %q; want \"\"", got)
	}
}
