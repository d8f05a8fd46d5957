package shaper

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// hashed is the form a key longer than key.max_length takes.
func hashed(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// A key longer than key.max_length is replaced where it is read, so the
// bucket holds only the short form, and the same long key is always the
// same lane. The key for messages without one stays as configured.
func TestAKeyLongerThanMaxLengthIsItsSHA256WhereItIsRead(t *testing.T) {
	key := keyFunc(&KeyConfig{From: "header:Key", Missing: "none"}, nil) // max_length left out: the default
	long := strings.Repeat("m", 60<<10)
	for _, tt := range []struct{ give, want string }{
		{strings.Repeat("k", DefaultMaxKeyLength), strings.Repeat("k", DefaultMaxKeyLength)},
		{strings.Repeat("k", DefaultMaxKeyLength+1), hashed(strings.Repeat("k", DefaultMaxKeyLength+1))},
		{long, hashed(long)},
	} {
		got := key(&Message{Header: map[string][]string{"Key": {tt.give}}})
		if got != tt.want || len(got) > DefaultMaxKeyLength {
			t.Errorf("key of %d bytes = %.80q (%d bytes); want %.80q", len(tt.give), got, len(got), tt.want)
		}
	}
	if got := key(&Message{}); got != "none" {
		t.Errorf("key of a message without one = %q; want none", got)
	}
	short := keyFunc(&KeyConfig{From: "header:Key", MaxLength: MinKeyLength}, nil)
	if got := short(&Message{Header: map[string][]string{"Key": {strings.Repeat("k", 72)}}}); got != hashed(strings.Repeat("k", 72)) {
		t.Errorf("key of 72 bytes with max_length %d = %q; want its sha256 form", MinKeyLength, got)
	}

	b := newBucket(100, laneOptions{})
	now := time.Now()
	b.admit(now, []*Message{{ID: "1", Header: map[string][]string{"Key": {long}}}}, key)
	b.admit(now, []*Message{{ID: "2", Header: map[string][]string{"Key": {strings.Clone(long)}}}}, key)
	if active, _ := b.keys(); active != 1 {
		t.Errorf("two messages of one 60 KiB key made %d lanes; want 1", active)
	}
	if top := b.top(10, now); len(top) != 1 || top[0].Key != hashed(long) || top[0].Depth != 2 {
		t.Errorf("lanes = %.200v; want one, %s, depth 2", top, hashed(long))
	}
}

func TestKeyMaxLengthIsValidated(t *testing.T) {
	tests := []struct {
		give KeyConfig
		want string // "" when valid
	}{
		{KeyConfig{From: "kafka_key"}, ""},
		{KeyConfig{From: "kafka_key", MaxLength: MinKeyLength}, ""},
		{KeyConfig{From: "kafka_key", MaxLength: MaxKeyLength}, ""},
		{KeyConfig{From: "kafka_key", MaxLength: 70}, "key.max_length: must be from 71 to 4096 bytes, got 70"},
		{KeyConfig{From: "kafka_key", MaxLength: 4097}, "key.max_length: must be from 71 to 4096 bytes, got 4097"},
		{KeyConfig{From: "kafka_key", MaxLength: -1}, "key.max_length: must be from 71 to 4096 bytes, got -1"},
		{KeyConfig{From: "kafka_key", Missing: strings.Repeat("x", 257)}, "key.missing: must be at most max_length (256 bytes), got 257 bytes"},
	}
	for _, tt := range tests {
		k := tt.give
		k.SetDefaults()
		err := k.Validate("key")
		if got := ""; err != nil {
			got = err.Error()
			if tt.want == "" || !strings.Contains(got, tt.want) {
				t.Errorf("%+v: %v; want %q", tt.give, err, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("%+v: valid; want %q", tt.give, tt.want)
		}
	}
}

// keysAnswer writes what writeJSON writes, and stops at the limit.
func TestKeysAnswerIsWriteJSONsFormWithinItsLimit(t *testing.T) {
	keys := []KeyStatus{{Key: "a<b", Depth: 3, OldestWait: 1.5}, {Key: "c", Depth: 2, Limit: 5}, {Key: "", Depth: 1}}
	for n := range len(keys) + 1 {
		rec := httptest.NewRecorder()
		writeJSON(rec, 200, append([]KeyStatus{}, keys[:n]...)) // [] for none, as top returns
		got, truncated := keysAnswer(keys[:n], maxKeysAnswer)
		if string(got) != rec.Body.String() || truncated {
			t.Errorf("%d lanes: %q, truncated %v; want %q as writeJSON", n, got, truncated, rec.Body.String())
		}
		for limit := 0; n > 0 && limit < len(got); limit++ {
			if part, truncated := keysAnswer(keys[:n], limit); len(part) > max(limit, len("[]\n")) || !truncated {
				t.Errorf("%d lanes within %d bytes: %d bytes, truncated %v; want at most %d, truncated", n, limit, len(part), truncated, limit)
			}
		}
	}
}

// The address a request arrives on is the server's own: a probe or a
// scrape by pod IP while listening on every interface. 192.0.2.0/24 is
// documentation space; nothing here connects to it.
func TestAdminHostsAllowsTheLocalAddressAndTheListenHost(t *testing.T) {
	pod := netip.MustParseAddr("192.0.2.10")
	tests := []struct {
		hosts AdminHosts
		host  string
		local netip.Addr
		want  bool
	}{
		{AdminHosts{Listen: "0.0.0.0:9090"}, "192.0.2.10:9090", pod, true},
		{AdminHosts{Listen: ":9090"}, "192.0.2.10", pod, true},
		{AdminHosts{Listen: ":9090"}, "[::ffff:192.0.2.10]:9090", pod, true},
		{AdminHosts{Listen: ":9090"}, "192.0.2.11:9090", pod, false},
		{AdminHosts{Listen: ":9090"}, "192.0.2.10:9090", netip.Addr{}, false},
		{AdminHosts{Listen: ":9090"}, "pod.evil.example:9090", pod, false},
		{AdminHosts{Listen: "0.0.0.0:9090"}, "evil.example", pod, false},
		{AdminHosts{Listen: "admin.internal:9090"}, "Admin.Internal.:9090", pod, true},
		{AdminHosts{Listen: "admin.internal:9090"}, "admin.internal.evil.example", pod, false},
		{AdminHosts{Listen: "[fd00::5]:9090"}, "[fd00::5]:9090", netip.Addr{}, true},
		{AdminHosts{Allowed: []string{"shaper:9090"}}, "shaper:9091", pod, false},
		{AdminHosts{Allowed: []string{"shaper:9090"}}, "shaper", pod, false},
		{AdminHosts{Allowed: []string{"shaper"}}, "shaper:9091", pod, true},
		{AdminHosts{}, "", pod, true},
	}
	for _, tt := range tests {
		if got := tt.hosts.Allows(tt.host, tt.local); got != tt.want {
			t.Errorf("%+v.Allows(%q, %v) = %v; want %v", tt.hosts, tt.host, tt.local, got, tt.want)
		}
	}
}

func TestValidAdminHost(t *testing.T) {
	for entry, want := range map[string]bool{
		"shaper": true, "shaper:9090": true, "shaper.monitoring.svc.cluster.local": true, "Shaper-1": true,
		"10.0.0.5": true, "10.0.0.5:9090": true, "[fd00::1]:9090": true, "fd00::1": true, "[fd00::1]": true, "shaper.": true,
		"": false, "shaper:": false, ":9090": false, "shaper:0": false, "shaper:65536": false, "shaper:x": false,
		"http://shaper": false, "shaper/metrics": false, "*.svc": false, "user@shaper": false, "-shaper": false,
		"sha per": false, "a..b": false, "[shaper]": false, "fe80::1%eth0": false,
	} {
		if got := ValidAdminHost(entry); got != want {
			t.Errorf("ValidAdminHost(%q) = %v; want %v", entry, got, want)
		}
	}
}
