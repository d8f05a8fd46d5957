package deploy_test

// Tests of the Kafka broker of deploy/docker-compose.yml: a single KRaft node
// of a version shaper's docs claim, set up so that it starts and that
// shaper and the demo's tools can reach it. No Docker engine runs where these
// tests run, so the settings a broker would refuse or trip over at start are
// checked here instead.

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kafkaImageRE is the official Apache Kafka image, with its version.
var kafkaImageRE = regexp.MustCompile(`^apache/kafka:(\d+)\.(\d+)\.(\d+)$`)

// claimedKafka reports whether shaper claims to work with Apache Kafka
// major.minor.patch (docs/operations.md, Deploying): 3.x from 3.3, where KRaft became
// ready for production, and 4.x but 4.0.0, which refused the JoinGroup v1
// that kafka-go up to v0.4.47 sent. Nothing newer is claimed until someone
// has looked at what it removed.
func claimedKafka(major, minor, patch int) bool {
	switch major {
	case 3:
		return minor >= 3
	case 4:
		return minor > 0 || patch >= 1
	}
	return false
}

func TestKafkaClaimedVersions(t *testing.T) {
	tests := []struct {
		give [3]int
		want bool
	}{
		{[3]int{2, 8, 2}, false},
		{[3]int{3, 2, 3}, false},
		{[3]int{3, 3, 0}, true},
		{[3]int{3, 9, 1}, true},
		{[3]int{4, 0, 0}, false},
		{[3]int{4, 0, 1}, true},
		{[3]int{4, 1, 0}, true},
		{[3]int{5, 0, 0}, false},
	}
	for _, tt := range tests {
		if got := claimedKafka(tt.give[0], tt.give[1], tt.give[2]); got != tt.want {
			t.Errorf("claimedKafka(%d.%d.%d) = %v; want %v", tt.give[0], tt.give[1], tt.give[2], got, tt.want)
		}
	}
}

// kafkaListeners parses a Kafka listener list, "NAME://host:port,...", into
// host:port by listener name.
func kafkaListeners(t *testing.T, key, list string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(list, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok || name == "" {
			t.Errorf("%s: %q is not NAME://host:port", key, l)
			continue
		}
		out[name] = addr
	}
	return out
}

func listenerPort(addr string) string {
	return addr[strings.LastIndex(addr, ":")+1:]
}

func TestComposeKafkaIsOneKRaftNodeOfAClaimedVersion(t *testing.T) {
	c := loadCompose(t)

	// One image, of a claimed version, for the broker and the tools.
	var images []string
	brokerName := ""
	for name, s := range c.Services {
		if !strings.HasPrefix(s.Image, "apache/kafka:") {
			continue
		}
		if !slices.Contains(images, s.Image) {
			images = append(images, s.Image)
		}
		if _, ok := s.env()["KAFKA_PROCESS_ROLES"]; ok {
			if brokerName != "" {
				t.Fatalf("services %s and %s both run a Kafka broker; the demo has one", brokerName, name)
			}
			brokerName = name
		}
	}
	if len(images) != 1 {
		t.Fatalf("Kafka images %q; want one, for the broker and the tools alike", images)
	}
	m := kafkaImageRE.FindStringSubmatch(images[0])
	if m == nil {
		t.Fatalf("Kafka image %q; want the official apache/kafka:MAJOR.MINOR.PATCH", images[0])
	}
	v := [3]int{}
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	if !claimedKafka(v[0], v[1], v[2]) {
		t.Errorf("Kafka %d.%d.%d is not a version shaper claims (3.3 to 3.x, 4.0.1 to 4.x): change the claim in docs/operations.md with it", v[0], v[1], v[2])
	}
	if brokerName == "" {
		t.Fatal("no service runs the Kafka broker (KAFKA_PROCESS_ROLES)")
	}
	env := c.Services[brokerName].env()
	need := func(key string) string {
		t.Helper()
		v, ok := env[key]
		if !ok || v == "" {
			t.Errorf("%s: %s is not set", brokerName, key)
		}
		return v
	}

	// KRaft, one node: broker and controller in one process, voting for itself.
	roles := strings.Split(need("KAFKA_PROCESS_ROLES"), ",")
	for _, want := range []string{"broker", "controller"} {
		if !slices.ContainsFunc(roles, func(r string) bool { return strings.TrimSpace(r) == want }) {
			t.Errorf("KAFKA_PROCESS_ROLES %q lacks %s: a single node is broker and controller", roles, want)
		}
	}
	listeners := kafkaListeners(t, "KAFKA_LISTENERS", need("KAFKA_LISTENERS"))
	protocols := map[string]bool{}
	for _, kv := range strings.Split(need("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"), ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(kv), ":")
		protocols[name] = true
	}
	for name := range listeners {
		if !protocols[name] {
			t.Errorf("listener %s has no security protocol in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", name)
		}
	}
	controller := need("KAFKA_CONTROLLER_LISTENER_NAMES")
	if _, ok := listeners[controller]; !ok {
		t.Errorf("KAFKA_CONTROLLER_LISTENER_NAMES %s is not in KAFKA_LISTENERS %v", controller, listeners)
	}
	if want := fmt.Sprintf("%s@%s:%s", need("KAFKA_NODE_ID"), brokerName, listenerPort(listeners[controller])); need("KAFKA_CONTROLLER_QUORUM_VOTERS") != want {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS %q; want %q, this node on its controller listener", env["KAFKA_CONTROLLER_QUORUM_VOTERS"], want)
	}
	if ib := need("KAFKA_INTER_BROKER_LISTENER_NAME"); ib == controller || listeners[ib] == "" {
		t.Errorf("KAFKA_INTER_BROKER_LISTENER_NAME %s: want a broker listener of KAFKA_LISTENERS", ib)
	}
	if id, err := base64.RawURLEncoding.DecodeString(need("CLUSTER_ID")); err != nil || len(id) != 16 {
		t.Errorf("CLUSTER_ID %q: want 16 bytes in unpadded base64url (kafka-storage.sh random-uuid)", env["CLUSTER_ID"])
	}

	// Internal topics default to 3 replicas, which one broker cannot hold:
	// without the offsets topic no consumer group forms.
	for _, key := range []string{
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR", "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR",
	} {
		if v := need(key); v != "1" {
			t.Errorf("%s %q; want 1 on a single broker", key, v)
		}
	}

	// What clients reach: the advertised listeners, never the controller's.
	advertised := kafkaListeners(t, "KAFKA_ADVERTISED_LISTENERS", need("KAFKA_ADVERTISED_LISTENERS"))
	var reachable []string
	for name, addr := range advertised {
		if name == controller {
			t.Errorf("KAFKA_ADVERTISED_LISTENERS advertises the controller listener %s; a broker refuses to start with it", name)
		}
		if l, ok := listeners[name]; !ok || listenerPort(l) != listenerPort(addr) {
			t.Errorf("advertised listener %s://%s does not match KAFKA_LISTENERS %v", name, addr, listeners)
		}
		reachable = append(reachable, addr)
	}
	var dialled []string
	for _, sh := range composedShapers(t, c) {
		for _, p := range sh.config.Pipelines {
			if k := p.Source.Kafka; k != nil {
				dialled = append(dialled, k.Brokers...)
			}
			if k := p.Sink.Kafka; k != nil {
				dialled = append(dialled, k.Brokers...)
			}
			if dl := p.DeadLetter; dl != nil && dl.Kafka != nil {
				dialled = append(dialled, dl.Kafka.Brokers...)
			}
		}
	}
	bootstrapRE := regexp.MustCompile(`--bootstrap-server[ =](\S+)`)
	for name, s := range c.Services {
		for _, m := range bootstrapRE.FindAllStringSubmatch(strings.Join(argList(s.Command), " "), -1) {
			if name != brokerName {
				dialled = append(dialled, m[1])
			}
		}
	}
	if len(dialled) == 0 {
		t.Fatal("nothing in the compose file dials Kafka")
	}
	for _, addr := range dialled {
		if !slices.Contains(reachable, addr) {
			t.Errorf("%s is dialled, but the broker advertises %q: clients would be sent elsewhere after their first request", addr, reachable)
		}
	}
}
