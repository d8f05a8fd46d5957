package urlguard_test

import (
	"fmt"
	"testing"

	"github.com/shaper-dev/shaper/internal/urlguard"
)

// BenchmarkCheck is one Check of an allowed URL against allowed_hosts of
// n exact names and n wildcards: the entries are filed by what they match,
// so a check costs about the same for any n.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1, 100, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", 2*n), func(b *testing.B) {
			var hosts []string
			for i := range n {
				hosts = append(hosts, fmt.Sprintf("api%d.partner.example", i), fmt.Sprintf("*.m%d.merchant.example", i))
			}
			g, err := urlguard.New(hosts, false)
			if err != nil {
				b.Fatal(err)
			}
			raw := fmt.Sprintf("https://pay.m%d.merchant.example/notify?id=42", n/2)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Check(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
