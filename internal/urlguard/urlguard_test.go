package urlguard

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/net/idna"
)

// testHosts is the allowed_hosts of the tests: names, a wildcard, a name on
// one port only, a name allowed over plain http, a public IPv4 and IPv6
// address.
var testHosts = []string{
	"allowed.example",
	"*.allowed.example",
	"api.partner.com",
	"*.merchant.example",
	"ports.example:8443",
	"http://plain.example",
	"http://plain-port.example:8080",
	"93.184.215.14",
	"[2606:4700:4700::1111]",
}

func mustNew(t testing.TB, hosts []string, allowPrivate bool) *Guard {
	t.Helper()
	g, err := New(hosts, allowPrivate)
	if err != nil {
		t.Fatalf("New(%q, %v): %v", hosts, allowPrivate, err)
	}
	return g
}

// lookAlike is allowed.example with a Cyrillic 'а' (U+0430) for the 'a'.
const lookAlike = "\u0430llowed.example"

func TestCheckRefusesHostileURLs(t *testing.T) {
	g := mustNew(t, testHosts, false)
	punycode, err := idna.Lookup.ToASCII(lookAlike)
	if err != nil || !strings.HasPrefix(punycode, "xn--") {
		t.Fatalf("idna.Lookup.ToASCII(%q) = %q, %v", lookAlike, punycode, err)
	}
	tests := []struct {
		give string
		want string // in the error
	}{
		// IP literals in every spelling a browser or the C resolver reads.
		{"https://0.0.0.0/", "0.0.0.0 is unspecified"},
		{"https://0/", "non-standard spelling"},
		{"https://[::]/", ":: is unspecified"},
		{"https://[::1]/", "::1 is loopback"},
		{"https://[0:0:0:0:0:0:0:1]:443/", "::1 is loopback"},
		{"https://[::ffff:127.0.0.1]/", "loopback (127.0.0.0/8), inside IPv4-mapped IPv6"},
		{"https://[::ffff:7f00:1]/", "loopback (127.0.0.0/8), inside IPv4-mapped IPv6"},
		{"https://[::127.0.0.1]/", "IPv4-compatible IPv6"},
		{"https://[64:ff9b::7f00:1]/", "loopback (127.0.0.0/8): 127.0.0.1 inside NAT64"},
		{"https://[2002:a9fe:a9fe::1]/", "cloud metadata service): 169.254.169.254 inside 6to4"},
		{"https://127.0.0.1/", "127.0.0.1 is loopback"},
		{"https://127.0.0.1./", "127.0.0.1 is loopback"},
		{"https://2130706433/", "non-standard spelling"},
		{"https://0x7f000001/", "non-standard spelling"},
		{"https://0X7F000001/", "non-standard spelling"},
		{"https://0177.0.0.1/", "non-standard spelling"},
		{"https://017700000001/", "non-standard spelling"},
		{"https://127.1/", "non-standard spelling"},
		{"https://0x7f.1/", "non-standard spelling"},
		{"https://0x7f.0x0.0x0.0x1/", "non-standard spelling"},
		{"https://127.0.0.1.1/", "non-standard spelling"},
		{"https://allowed.example.1/", "non-standard spelling"},
		{"https://[127.0.0.1]/", "in brackets is not an IPv6 address"},
		{"https://[fe80::1%25eth0]/", "IPv6 zone"},
		{"https://[fe80::1]/", "fe80::1 is link-local"},
		{"https://[fd00:ec2::254]/", "unique local"},
		{"https://[fec0::1]/", "site-local"},
		{"https://[ff02::1]/", "multicast"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local (169.254.169.254: the cloud metadata service)"},
		{"https://100.100.100.200/", "carrier-grade NAT"},
		{"https://10.0.0.1/", "private (10.0.0.0/8)"},
		{"https://192.168.1.1/", "private (192.168.0.0/16)"},
		{"https://172.16.0.1/", "private (172.16.0.0/12)"},
		{"https://224.0.0.1/", "multicast"},
		{"https://255.255.255.255/", "broadcast"},
		{"https://8.8.8.8/", "IP address 8.8.8.8 is not listed in allowed_hosts"},
		{"https://[::ffff:93.184.215.14]/", "IPv4-mapped IPv6 address; only 93.184.215.14 could be listed"},

		// Schemes.
		{"file:///etc/passwd", `scheme "file": want https`},
		{"gopher://x", `scheme "gopher": want https`},
		{"ftp://", `scheme "ftp": want https`},
		{"ws://allowed.example/", `scheme "ws": want https`},
		{"javascript:alert(1)", `scheme "javascript": want https`},
		{"data:text/html,<script>alert(1)</script>", `scheme "data": want https`},
		{"//allowed.example/path", "no scheme"},
		{"/path", "no scheme"},
		{"allowed.example/path", "no scheme"},
		{"http://allowed.example/", `plain http to "allowed.example": want https`},
		{"http://plain-port.example/", "port 80 of host \"plain-port.example\" is not allowed"},

		// Hosts that are, or look like, someone else's.
		{"https://allowed.example@evil.example/", "user information"},
		{"https://user:secret@allowed.example/", "user information"},
		{"https://@allowed.example/", "user information"},
		{"https://allowed.example@/", "user information"},
		{"https://evil.example#@allowed.example", `host "evil.example" is not in allowed_hosts`},
		{"https://evil.example?@allowed.example", `host "evil.example" is not in allowed_hosts`},
		{"https://evil.example/@allowed.example", `host "evil.example" is not in allowed_hosts`},
		{"https://allowed.example.evil.example/", `host "allowed.example.evil.example" is not in allowed_hosts`},
		{"https://evilallowed.example/", `host "evilallowed.example" is not in allowed_hosts`},
		{"https://merchant.example/", `host "merchant.example" is not in allowed_hosts`},
		{"https://localhost/", `host "localhost" is not in allowed_hosts`},
		{"https://allowed.example\\@evil.example", "a backslash at byte 23"},
		{"https:\\\\evil.example", "a backslash"},
		{"https://" + lookAlike + "/", "non-ASCII host name"},
		{"https://allowed\u3002example/", "non-ASCII host name"},
		{"https://\uff41llowed.example/", "non-ASCII host name"},
		{"https://" + punycode + "/", `host "` + punycode + `" is not in allowed_hosts`},
		{"https://%61llowed.example/", "percent-encoding in the host"},
		{"https://allowed.example%2eevil.example/", "percent-encoding in the host"},
		{"https://allowed.example%00/", "percent-encoding in the host"},
		{"https://*.allowed.example/", `character '*' in the host name`},
		{"https://allowed.example:443:80/", `character ':' in the host name`},
		{"https://allowed..example/", "an empty label"},
		{"https://allowed.example../", "an empty label"},
		{"https://.allowed.example/", "an empty label"},
		{"https://" + strings.Repeat("a", 64) + ".allowed.example/", "a label longer than 63"},

		// Ports.
		{"https://allowed.example:0/", `port "0" is not a number from 1 to 65535`},
		{"https://allowed.example:65536/", `port "65536" is not`},
		{"https://allowed.example:99999999999999999999/", "is not a number from 1 to 65535"},
		{"https://ports.example/", `port 443 of host "ports.example" is not allowed`},
		{"https://ports.example:8444/", `port 8444 of host "ports.example" is not allowed`},

		// Shapes that are not an absolute URL with a host.
		{"", "no URL"},
		{"https:", "no host"},
		{"https://", "no host"},
		{"https:///allowed.example/", "no host"},
		{"https:allowed.example", "no host"},
		{"https:/allowed.example", "no host"},
		{"https://[::1", "'[' without ']'"},

		// Size and bytes that split a header or a request line.
		{"https://allowed.example/" + strings.Repeat("a", 100<<10), "longer than 8192 bytes (102424)"},
		{"https://allowed.example/" + strings.Repeat("\xd8", 3000), "longer than 8192 bytes once escaped (9024)"},
		{"https://allowed.example/\r\nHost: evil.example", "a control character (0x0d) at byte 24"},
		{"https://allowed.example/\nX: y", "a control character (0x0a)"},
		{"https://allowed.example\x00.evil.example/", "a control character (0x00) at byte 23"},
		{"https://allowed.example/\t", "a control character (0x09)"},
		{"https://allowed.example/\x7f", "a control character (0x7f)"},
		{" https://allowed.example/", "a space at byte 0"},
		{"https://allowed.example/a b", "a space at byte 25"},
	}
	for _, tt := range tests {
		u, err := g.Check(tt.give)
		if err == nil {
			t.Errorf("Check(%.80q) = %s; want refused: %s", tt.give, u, tt.want)
			continue
		}
		if !errors.Is(err, ErrRefused) {
			t.Errorf("Check(%.80q) = %v; want an error wrapping ErrRefused", tt.give, err)
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%.80q) = %v; want it to say %q", tt.give, err, tt.want)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Check(%.80q) = %v: shows the password", tt.give, err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("Check(%.80q): error of %d bytes; want a short reason", tt.give, len(err.Error()))
		}
	}
}

func TestCheckAllowsListedHostsInCanonicalForm(t *testing.T) {
	g := mustNew(t, testHosts, false)
	tests := []struct {
		give string
		want string
	}{
		{"https://api.partner.com/notify", "https://api.partner.com/notify"},
		{"https://api.partner.com:9000/notify", "https://api.partner.com:9000/notify"},
		{"https://a.b.merchant.example/x?y=1", "https://a.b.merchant.example/x?y=1"},
		{"https://shop.merchant.example", "https://shop.merchant.example"},
		{"https://allowed.example/", "https://allowed.example/"},
		{"https://ALLOWED.EXAMPLE.", "https://allowed.example"},
		{"HTTPS://Allowed.Example.:443/Path?Q=A#frag", "https://allowed.example/Path?Q=A"},
		{"https://allowed.example:00443/", "https://allowed.example/"},
		{"https://allowed.example:/", "https://allowed.example/"},
		{"https://x.allowed.example/%2e%2e/?q=a%20b&r=%0d%0a", "https://x.allowed.example/%2e%2e/?q=a%20b&r=%0d%0a"},
		{"https://x.allowed.example/caf\u00e9", "https://x.allowed.example/caf%C3%A9"},
		{"https://ports.example:8443/hook", "https://ports.example:8443/hook"},
		{"http://plain.example/hook", "http://plain.example/hook"},
		{"https://plain.example/hook", "https://plain.example/hook"},
		{"http://plain-port.example:8080/", "http://plain-port.example:8080/"},
		{"https://93.184.215.14/x", "https://93.184.215.14/x"},
		{"https://[2606:4700:4700::1111]:8443/", "https://[2606:4700:4700::1111]:8443/"},
		{"https://[2606:4700:4700:0:0:0:0:1111]/", "https://[2606:4700:4700::1111]/"},
		{"https://under_score.allowed.example/", "https://under_score.allowed.example/"},
	}
	for _, tt := range tests {
		u, err := g.Check(tt.give)
		if err != nil {
			t.Errorf("Check(%q) = %v; want %s", tt.give, err, tt.want)
			continue
		}
		if got := u.String(); got != tt.want {
			t.Errorf("Check(%q) = %s; want %s", tt.give, got, tt.want)
		}
	}
}

func TestCheckAllowsHTTPAndPrivateAddressesWithAllowPrivate(t *testing.T) {
	g := mustNew(t, []string{"allowed.example", "127.0.0.1", "[::1]:8080", "localhost", "10.1.2.3:9000"}, true)
	tests := []struct {
		give string
		want string // "" for refused
	}{
		{"http://allowed.example/", "http://allowed.example/"},
		{"http://127.0.0.1:8080/hook", "http://127.0.0.1:8080/hook"},
		{"https://[::1]:8080/", "https://[::1]:8080/"},
		{"http://localhost:9/", "http://localhost:9/"},
		{"http://10.1.2.3:9000/", "http://10.1.2.3:9000/"},
		{"http://10.1.2.3/", ""},    // not on that port
		{"http://127.1:8080/", ""},  // one spelling only
		{"http://[::1]/", ""},       // not on that port
		{"http://127.0.0.2/", ""},   // not listed
		{"gopher://127.0.0.1/", ""}, // still http or https
		{"http://u@127.0.0.1/", ""}, // still no user information
	}
	for _, tt := range tests {
		u, err := g.Check(tt.give)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("Check(%q) = %s; want refused", tt.give, u)
		case tt.want != "" && err != nil:
			t.Errorf("Check(%q) = %v; want %s", tt.give, err, tt.want)
		case tt.want != "" && u.String() != tt.want:
			t.Errorf("Check(%q) = %s; want %s", tt.give, u, tt.want)
		}
	}
}

func TestZeroGuardRefusesEveryURL(t *testing.T) {
	var g Guard
	for _, raw := range []string{"https://allowed.example/", "https://93.184.215.14/"} {
		if u, err := g.Check(raw); !errors.Is(err, ErrRefused) {
			t.Errorf("Guard{}.Check(%q) = %v, %v; want refused", raw, u, err)
		}
	}
}

func TestNewRefusesEveryBadEntryAtOnce(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"*", "matches every host"},
		{"*.", "matches every host"},
		{"http://*", "matches every host"},
		{"", "empty"},
		{"https://x.example/path", "has a path, query or fragment"},
		{"x.example?q", "has a path, query or fragment"},
		{"x y", "white space"},
		{" x.example", "white space"},
		{"x.example\n", "white space or a control character"},
		{"*.com", "matches a whole public suffix (com)"},
		{"*.co.uk", "matches a whole public suffix (co.uk)"},
		{"*.github.io", "matches a whole public suffix (github.io)"},
		{"*.example", "matches a whole public suffix (example)"},
		{"a.*.example", "'*' is allowed only as the whole first label"},
		{"*x.example", "'*' is allowed only as the whole first label"},
		{"*.*.example", "'*' is allowed only as the whole first label"},
		{"*.1.2.3.4", "a wildcard of an IP address"},
		{"ftp://x.example", `scheme "ftp"`},
		{"user:hunter2@x.example", "has user information"},
		{"https://user:hunter2@x.example", "has user information"},
		{"10.0.0.1", "10.0.0.1 is private (10.0.0.0/8): allowed only with allow_private"},
		{"169.254.169.254", "the cloud metadata service"},
		{"[::1]", "::1 is loopback"},
		{"fd00::1", "unique local"},
		{"localhost", "localhost is loopback"},
		{"*.localhost", "names under localhost are loopback"},
		{"0x7f.1", "non-standard spelling"},
		{"2130706433", "non-standard spelling"},
		{"[::ffff:1.2.3.4]", "an IPv4-mapped IPv6 address: write 1.2.3.4"},
		{"[fe80::1%25eth0]", "percent-encoding or an IPv6 zone"},
		{"[1.2.3.4]", "not an IPv6 address"},
		{"[::1", "'[' without ']'"},
		{"[2606:4700::1]x", "something other than :port after ']'"},
		{"x.example:", "no port after ':'"},
		{"x.example:0", `port "0" is not a number from 1 to 65535`},
		{"x.example:65536", `port "65536" is not`},
		{"x.example:https", `port "https" is not`},
		{"b\u00fccher.example", "non-ASCII host name: write it in its punycode form"},
		{"a..example", "an empty label"},
		{"http://", "no host"},
		{"x!.example", `character '!' in the host name`},
	}
	var hosts []string
	for _, tt := range tests {
		hosts = append(hosts, tt.give)
	}
	g, err := New(hosts, false)
	if g != nil || err == nil {
		t.Fatalf("New(every bad entry) = %v, %v; want an error", g, err)
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	if len(errs) != len(tests) {
		t.Fatalf("New(%d bad entries) gave %d errors; want one each:\n%v", len(tests), len(errs), err)
	}
	for i, tt := range tests {
		var ee *EntryError
		if !errors.As(errs[i], &ee) {
			t.Errorf("error %d = %v; want an *EntryError", i, errs[i])
			continue
		}
		if ee.Index != i {
			t.Errorf("allowed_hosts[%d] %q: error at index %d", i, tt.give, ee.Index)
		}
		if !strings.Contains(ee.Error(), tt.want) {
			t.Errorf("allowed_hosts[%d] %q: %v; want it to say %q", i, tt.give, ee, tt.want)
		}
		if strings.Contains(ee.Error(), "hunter2") {
			t.Errorf("allowed_hosts[%d]: %v: shows the password", i, ee)
		}
	}
}

func TestNewRefusesNoHosts(t *testing.T) {
	for _, hosts := range [][]string{nil, {}} {
		if _, err := New(hosts, true); err == nil || !strings.Contains(err.Error(), "allowed_hosts: required") {
			t.Errorf("New(%q) = %v; want allowed_hosts: required", hosts, err)
		}
	}
}

func TestNewAcceptsEntries(t *testing.T) {
	tests := []struct {
		give         []string
		allowPrivate bool
	}{
		{give: testHosts},
		{give: []string{"HTTP://Plain.Example", "https://x.example", "Allowed.Example.", "api.partner.com:8443", "[2606:4700:4700::1111]:443", "2606:4700:4700::1111", "*.svc.example.com"}},
		{give: []string{"10.0.0.1", "localhost", "*.localhost", "[::1]", "http://127.0.0.1:8080", "fd00::1"}, allowPrivate: true},
	}
	for _, tt := range tests {
		if _, err := New(tt.give, tt.allowPrivate); err != nil {
			t.Errorf("New(%q, %v) = %v; want nil", tt.give, tt.allowPrivate, err)
		}
	}
}

func TestEntryErrorHidesAnEntryWithUserInformation(t *testing.T) {
	bad := []string{"ftp://u:pw@x.example", "u:pw @x.example", "u:pw@", "https://u:pw@x.example/path"}
	_, err := New(append([]string{"ok.example"}, bad...), false)
	errs := err.(interface{ Unwrap() []error }).Unwrap()
	if len(errs) != len(bad) {
		t.Fatalf("New gave %d errors; want %d:\n%v", len(errs), len(bad), err)
	}
	for i, e := range errs {
		var ee *EntryError
		if !errors.As(e, &ee) || ee.Index != i+1 || ee.Entry != "" || strings.Contains(ee.Error(), "pw") {
			t.Errorf("allowed_hosts[%d] %q: %v; want an *EntryError at %d without the entry", i+1, bad[i], e, i+1)
		}
	}
}
