package urlguard_test

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/shaper-dev/shaper/internal/urlguard"
)

// The HTTP sink checks the URL each message names, then sends it through a
// Transport whose dialer refuses addresses that are not public.
func ExampleGuard() {
	g, err := urlguard.New([]string{"*.merchant.example", "api.partner.com:8443"}, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: g.Control}
	transport := &http.Transport{DialContext: dialer.DialContext}
	defer transport.CloseIdleConnections()

	for _, raw := range []string{
		"https://Shop.Merchant.Example./notify?order=42#top",
		"https://api.partner.com/notify",
		"http://169.254.169.254/latest/meta-data/",
		"https://merchant.example.evil.example/",
	} {
		u, err := g.Check(raw)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("request", u)
	}
	// Output:
	// request https://shop.merchant.example/notify?order=42
	// destination refused: port 443 of host "api.partner.com" is not allowed: its allowed_hosts entries name other ports
	// destination refused: 169.254.169.254 is link-local (169.254.169.254: the cloud metadata service); refused without allow_private
	// destination refused: host "merchant.example.evil.example" is not in allowed_hosts
}

// New reports every entry it refuses, each with its index.
func ExampleNew() {
	_, err := urlguard.New([]string{"api.partner.com", "*", "*.com", "https://x.example/hook", "10.0.0.1"}, false)
	fmt.Println(err)
	// Output:
	// allowed_hosts[1]: "*": matches every host; name the hosts, or *.suffix for the subdomains of one
	// allowed_hosts[2]: "*.com": matches a whole public suffix (com): anyone can register a name under it
	// allowed_hosts[3]: "https://x.example/hook": has a path, query or fragment; an entry is a host, host:port or *.suffix
	// allowed_hosts[4]: "10.0.0.1": 10.0.0.1 is private (10.0.0.0/8): allowed only with allow_private
}
