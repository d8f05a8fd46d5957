package urlguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestControlRefusesAddressesThatAreNotPublic(t *testing.T) {
	g := mustNew(t, []string{"allowed.example"}, false)
	tests := []struct {
		give string
		want string
	}{
		{"127.0.0.1:443", "127.0.0.1 is loopback"},
		{"127.255.255.254:80", "loopback"},
		{"[::1]:443", "::1 is loopback"},
		{"0.0.0.0:80", "unspecified"},
		{"0.1.2.3:80", "this network"},
		{"[::]:80", "unspecified"},
		{"10.0.0.1:80", "private (10.0.0.0/8)"},
		{"172.31.255.255:80", "private (172.16.0.0/12)"},
		{"192.168.0.1:80", "private (192.168.0.0/16)"},
		{"169.254.169.254:80", "the cloud metadata service"},
		{"169.254.1.1:80", "link-local (169.254.0.0/16)"},
		{"100.64.0.1:80", "carrier-grade NAT"},
		{"100.127.255.255:80", "carrier-grade NAT"},
		{"192.0.0.192:80", "IETF protocol assignments"},
		{"192.0.2.1:80", "documentation"},
		{"198.18.0.1:80", "benchmarking"},
		{"224.0.0.251:5353", "multicast"},
		{"239.255.255.250:1900", "multicast"},
		{"255.255.255.255:80", "broadcast"},
		{"240.0.0.1:80", "reserved"},
		{"[::ffff:127.0.0.1]:443", "loopback (127.0.0.0/8), inside IPv4-mapped IPv6"},
		{"[::ffff:169.254.169.254]:80", "metadata service), inside IPv4-mapped IPv6"},
		{"[::ffff:10.0.0.1]:80", "private (10.0.0.0/8), inside IPv4-mapped IPv6"},
		{"[::127.0.0.1]:80", "IPv4-compatible IPv6"},
		{"[::ffff:0:7f00:1]:80", "IPv4-translated"},
		{"[64:ff9b::7f00:1]:80", "loopback (127.0.0.0/8): 127.0.0.1 inside NAT64"},
		{"[64:ff9b::a9fe:a9fe]:80", "169.254.169.254 inside NAT64"},
		{"[64:ff9b:1::a00:1]:80", "local-use NAT64"},
		{"[2002:7f00:1::1]:80", "127.0.0.1 inside 6to4"},
		{"[2002:c0a8:101::1]:80", "192.168.1.1 inside 6to4"},
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", "192.0.2.45 inside Teredo 2001::/32, as its client"},
		{"[2001:0:7f00:1::1]:80", "127.0.0.1 inside Teredo 2001::/32, as its server"},
		{"[fd00:ec2::254]:80", "unique local"},
		{"[fc00::1]:80", "unique local"},
		{"[fe80::1]:80", "link-local (fe80::/10)"},
		{"[fe80::1%eth0]:80", "link-local (fe80::/10)"},
		{"[fec0::1]:80", "site-local"},
		{"[ff02::1]:80", "multicast"},
		{"[100::1]:80", "discard-only"},
		{"[2001:db8::1]:80", "documentation"},
		{"[3fff::1]:80", "documentation"},
		{"[5f00::1]:80", "not global unicast"},
		{"[4000::1]:80", "not global unicast"},
		{"localhost:80", "not an IP address and port"},
		{"127.0.0.1", "not an IP address and port"},
		{"", "not an IP address and port"},
	}
	for _, tt := range tests {
		err := g.Control("tcp", tt.give, nil)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Control(tcp, %q) = %v; want refused: %s", tt.give, err, tt.want)
		}
	}
}

func TestControlAllowsPublicAddresses(t *testing.T) {
	g := mustNew(t, []string{"allowed.example"}, false)
	for _, addr := range []string{
		"8.8.8.8:443",
		"1.1.1.1:80",
		"93.184.215.14:443",
		"100.128.0.1:443", // just past 100.64.0.0/10
		"172.32.0.1:443",  // just past 172.16.0.0/12
		"[2606:4700:4700::1111]:443",
		"[::ffff:8.8.8.8]:443",
		"[64:ff9b::808:808]:443",                     // NAT64 of 8.8.8.8
		"[2002:808:808::1]:443",                      // 6to4 of 8.8.8.8
		"[2001:0:4136:e378:8000:63bf:f7f7:f7f7]:443", // Teredo of client 8.8.8.8
	} {
		if err := g.Control("tcp", addr, nil); err != nil {
			t.Errorf("Control(tcp, %q) = %v; want nil", addr, err)
		}
	}
}

func TestControlAllowsEveryAddressWithAllowPrivate(t *testing.T) {
	g := mustNew(t, []string{"allowed.example"}, true)
	for _, addr := range []string{"127.0.0.1:443", "[::1]:443", "169.254.169.254:80", "10.0.0.1:80", "[fe80::1%eth0]:80", "0.0.0.0:80"} {
		if err := g.Control("tcp", addr, nil); err != nil {
			t.Errorf("Control(tcp, %q) = %v; want nil (allow_private)", addr, err)
		}
	}
}

func TestNonPublicReadsNoInvalidAddressAsPublic(t *testing.T) {
	if got := nonPublic(netip.Addr{}); got == "" {
		t.Errorf("nonPublic(invalid) = %q; want a reason", got)
	}
}

// listen starts a TCP listener on addr and returns it with the remote
// address of each connection it accepts, in order; it skips the test when
// addr cannot be listened on (no ::1).
func listen(t *testing.T, addr string) (net.Listener, <-chan net.Addr) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	accepted := make(chan net.Addr)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case accepted <- c.RemoteAddr():
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); ln.Close(); <-done })
	return ln, accepted
}

func TestDialRefusesLoopbackWithoutAllowPrivate(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			ln, accepted := listen(t, addr)
			g := mustNew(t, []string{"allowed.example"}, false)
			d := &net.Dialer{Timeout: 5 * time.Second, Control: g.Control}
			c, err := d.Dial("tcp", ln.Addr().String())
			if err == nil {
				c.Close()
				t.Fatalf("Dial(%s) through Control succeeded; want refused", ln.Addr())
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is loopback") {
				t.Fatalf("Dial(%s) = %v; want ErrRefused, loopback", ln.Addr(), err)
			}
			// A connection made by the guarded dial would be accepted
			// before this one, made without the guard.
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatalf("Dial(%s) without the guard: %v", ln.Addr(), err)
			}
			defer c.Close()
			if first := <-accepted; first.String() != c.LocalAddr().String() {
				t.Errorf("the listener first accepted a connection from %s; want %s, the unguarded dial's", first, c.LocalAddr())
			}
		})
	}
}

func TestDialAllowsLoopbackWithAllowPrivate(t *testing.T) {
	ln, accepted := listen(t, "127.0.0.1:0")
	g := mustNew(t, []string{"allowed.example"}, true)
	d := &net.Dialer{Timeout: 5 * time.Second, Control: g.Control}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("Dial(%s) with allow_private = %v; want a connection", ln.Addr(), err)
	}
	defer c.Close()
	if first := <-accepted; first.String() != c.LocalAddr().String() {
		t.Errorf("the listener accepted a connection from %s; want %s", first, c.LocalAddr())
	}
}

// startDNS starts a DNS server on 127.0.0.1 that answers every A question
// with ip and every other question with no answer, and returns a resolver
// that asks it and nothing else.
func startDNS(t *testing.T, ip netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp, err := dnsAnswer(buf[:n], ip); err == nil {
				asked.Add(1)
				pc.WriteTo(resp, from)
			}
		}
	}()
	t.Cleanup(func() {
		pc.Close()
		<-done
		if asked.Load() == 0 {
			t.Error("the fake DNS server was never asked")
		}
	})
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}
}

// dnsAnswer answers the DNS query q: an A record of ip for an A question.
func dnsAnswer(q []byte, ip netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	question, err := p.Question()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(question); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if question.Type == dnsmessage.TypeA {
		rh := dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0}
		if err := b.AResource(rh, dnsmessage.AResource{A: ip.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// TestDNSRebindingIsRefusedOnDial sends a request as the HTTP sink would:
// a name that Check allows, whose DNS answer is 127.0.0.1, through a
// Transport whose dialer has Control. Without allow_private no connection
// is made; with it, the request arrives.
func TestDNSRebindingIsRefusedOnDial(t *testing.T) {
	var conns, requests atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	raw := "http://rebind.allowed.example:" + port + "/hook"

	for _, allowPrivate := range []bool{false, true} {
		g := mustNew(t, []string{"http://*.allowed.example"}, allowPrivate)
		u, err := g.Check(raw)
		if err != nil {
			t.Fatalf("Check(%q) = %v; want allowed (the name is listed; Check resolves nothing)", raw, err)
		}
		dialer := &net.Dialer{Timeout: 5 * time.Second, Resolver: startDNS(t, netip.MustParseAddr("127.0.0.1")), Control: g.Control}
		transport := &http.Transport{DialContext: dialer.DialContext}
		client := &http.Client{Transport: transport}
		resp, err := client.Get(u.String())
		if err == nil {
			resp.Body.Close()
		}
		transport.CloseIdleConnections()
		if !allowPrivate {
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "127.0.0.1 is loopback") {
				t.Fatalf("GET %s without allow_private = %v; want ErrRefused, loopback", u, err)
			}
			if n := conns.Load(); n != 0 {
				t.Fatalf("the server saw %d connections; want none", n)
			}
			continue
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with allow_private = %v; want 200", u, err)
		}
		if n := requests.Load(); n != 1 {
			t.Errorf("the server saw %d requests; want 1", n)
		}
	}
}
