// This file holds what makes an address public and the dialer's Control
// hook that refuses the others.

package urlguard

import (
	"fmt"
	"net/netip"
	"syscall"
)

// Control is a net.Dialer's Control hook: it refuses the connection, before
// a packet is sent, when the address dialled is not public, unless
// allow_private. The dialer calls it after resolving the name, once for
// each address it tries, so a name that passed Check but resolves to
// loopback or to the metadata service (DNS rebinding, or a name that
// simply points there) is refused here:
//
//	dialer := &net.Dialer{Timeout: 10 * time.Second, Control: g.Control}
//	transport := &http.Transport{DialContext: dialer.DialContext}
//
// The error wraps ErrRefused; net.Dialer returns it inside a *net.OpError,
// and http.Client inside a *url.Error, both of which errors.Is sees
// through. Through a proxy the dialer dials the proxy, not the
// destination, and this hook judges the proxy's address: a proxy defeats
// the check on the destination's address.
//
// Not public: unspecified (0.0.0.0, ::), loopback, private (10/8,
// 172.16/12, 192.168/16, fc00::/7), link-local (169.254/16, which holds
// the cloud metadata address 169.254.169.254, and fe80::/10),
// carrier-grade NAT (100.64/10), multicast, broadcast and reserved,
// documentation and benchmarking ranges, IPv6 outside 2000::/3, site-local
// fec0::/10, and IPv6 that embeds one of those IPv4 addresses
// (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16, Teredo) or is
// IPv4-compatible (deprecated).
func (g *Guard) Control(network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refuse("dial %s %q: not an IP address and port", network, address)
	}
	if g.allowPrivate {
		return nil
	}
	if why := nonPublic(ap.Addr()); why != "" {
		return refuse("%s is %s; refused without allow_private", ap.Addr(), why)
	}
	return nil
}

// special is a range of addresses that is not public, and what it is.
type special struct {
	prefix netip.Prefix
	what   string
}

// special4 holds the IPv4 ranges that are not public, the narrower before
// the wider where they overlap (IANA IPv4 Special-Purpose Address
// Registry; the few of its entries that are globally reachable, such as
// 192.0.0.9/32, are refused all the same, with 192.0.0.0/24).
var special4 = []special{
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified (0.0.0.0: every local interface)"},
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (10.0.0.0/8)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (100.64.0.0/10, carrier-grade NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8)"},
	{netip.MustParsePrefix("169.254.169.254/32"), "link-local (169.254.169.254: the cloud metadata service)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (172.16.0.0/12)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (192.0.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation (192.0.2.0/24)"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast (192.88.99.0/24)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (192.168.0.0/16)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (198.18.0.0/15)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation (198.51.100.0/24)"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation (203.0.113.0/24)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast (255.255.255.255)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (240.0.0.0/4)"},
}

// special6 holds the IPv6 ranges that are not public, beside those that
// embed an IPv4 address (nonPublic reads that address instead) and
// everything outside 2000::/3 (IANA IPv6 Special-Purpose Address
// Registry).
var special6 = []special{
	{netip.MustParsePrefix("::/128"), "unspecified (::: every local interface)"},
	{netip.MustParsePrefix("::1/128"), "loopback (::1)"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 (::/96, deprecated)"},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated IPv6 (::ffff:0:0:0/96)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 (64:ff9b:1::/48)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (100::/64)"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking (2001:2::/48)"},
	{netip.MustParsePrefix("2001:10::/28"), "ORCHID (2001:10::/28, deprecated)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation (2001:db8::/32)"},
	{netip.MustParsePrefix("3fff::/20"), "documentation (3fff::/20)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local, private (fc00::/7)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)"},
	{netip.MustParsePrefix("fec0::/10"), "site-local (fec0::/10, deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast (ff00::/8)"},
}

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	teredo         = netip.MustParsePrefix("2001::/32")
)

// nonPublic says what ip is when it is not a public address
// ("loopback (127.0.0.0/8)"), or returns "" when it is. A zone is ignored.
func nonPublic(ip netip.Addr) string {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		if what := nonPublic(ip.Unmap()); what != "" {
			return what + ", inside IPv4-mapped IPv6"
		}
		return ""
	}
	if ip.Is4() {
		for _, s := range special4 {
			if s.prefix.Contains(ip) {
				return s.what
			}
		}
		return ""
	}
	if !ip.Is6() {
		return "not an IP address"
	}
	for _, s := range special6 {
		if s.prefix.Contains(ip) {
			return s.what
		}
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return embedded(netip.AddrFrom4([4]byte(b[12:16])), "NAT64 64:ff9b::/96")
	case sixToFour.Contains(ip):
		return embedded(netip.AddrFrom4([4]byte(b[2:6])), "6to4 2002::/16")
	case teredo.Contains(ip):
		// The Teredo server's address, then the client's, stored inverted.
		if what := embedded(netip.AddrFrom4([4]byte(b[4:8])), "Teredo 2001::/32, as its server"); what != "" {
			return what
		}
		return embedded(netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), "Teredo 2001::/32, as its client")
	case !globalUnicast6.Contains(ip):
		return "not global unicast (outside 2000::/3)"
	}
	return ""
}

// embedded says what v4, embedded in an IPv6 address as how, is when it is
// not public, or returns "".
func embedded(v4 netip.Addr, how string) string {
	if what := nonPublic(v4); what != "" {
		return fmt.Sprintf("%s: %s inside %s", what, v4, how)
	}
	return ""
}
