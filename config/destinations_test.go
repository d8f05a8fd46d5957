package config

import (
	"fmt"
	"strings"
	"testing"
)

// With rate.shared and rate.adaptive, what holds each destination's
// adaptive limit: the pipeline's shared limit when there is one
// destination; a Redis key per destination otherwise, the lane's per-key
// one when the lanes are the destinations and carry shared per-key limits;
// each replica's own when a lane lives in one Kafka partition.
func TestSharedDestinationsSaysWhereEachDestinationsAdaptiveLimitLives(t *testing.T) {
	const shared = `shared: {redis: {addr: "127.0.0.1:6379"}, key: "shaper:psp", fallback_limit: 25}`
	tests := []struct {
		name        string
		rate        string // the rate mapping
		key         string // the key mapping ("": none)
		sink        string
		source      string // "": minimal's JetStream
		pushback    string
		adaptsPipe  bool
		shared      bool
		lanes       bool
		prefix      string
		limit, fall float64
		every       bool // AtLimitEvery set
	}{
		{name: "not shared", rate: "{limit: 50, adaptive: {}}", sink: `{http: {url_from: "header:Notify-Url", allowed_hosts: [a.example]}}`},
		{name: "not adaptive", rate: "{limit: 50, " + shared + "}", sink: `{http: {url_from: "header:Notify-Url", allowed_hosts: [a.example]}}`},
		{name: "one destination", rate: "{limit: 50, adaptive: {}, " + shared + "}", sink: `{http: {url: "https://psp.example.com/notify"}}`, adaptsPipe: true},
		{name: "url_from", rate: "{limit: 50, adaptive: {}, " + shared + "}", sink: `{http: {url_from: "header:Notify-Url", allowed_hosts: [a.example]}}`,
			shared: true, prefix: "shaper:psp:dest:", limit: 50, fall: 25, every: true},
		{name: "url_from, header keys with per_key", rate: "{limit: 50, adaptive: {}, per_key: {limit: 10}, " + shared + "}", key: "{from: 'header:Merchant-Id'}",
			sink: `{http: {url_from: "header:Notify-Url", allowed_hosts: [a.example]}}`, shared: true, prefix: "shaper:psp:dest:", limit: 10, fall: 5, every: true},
		{name: "key.from: host with per_key", rate: "{limit: 50, adaptive: {}, per_key: {limit: 10}, " + shared + "}", key: "{from: host}",
			sink: `{http: {url_from: "header:Notify-Url", allowed_hosts: [a.example]}}`, shared: true, lanes: true, prefix: "shaper:psp:key:", limit: 10, fall: 5},
		{name: "scope key with per_key", rate: "{limit: 50, adaptive: {}, per_key: {limit: 10}, " + shared + "}", key: "{from: 'header:Merchant-Id'}", pushback: "{scope: key}",
			sink: `{http: {url: "https://psp.example.com/notify"}}`, shared: true, lanes: true, prefix: "shaper:psp:key:", limit: 10, fall: 5},
		{name: "scope key, Kafka keys", rate: "{limit: 50, adaptive: {}, " + shared + "}", key: "{from: kafka_key}", pushback: "{scope: key}",
			source: "kafka: {brokers: ['127.0.0.1:9092'], topic: callbacks, group: shaper-psp}", sink: `{http: {url: "https://psp.example.com/notify"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(minimal, "rate: {limit: 50}", "rate: "+tt.rate, 1)
			src = strings.Replace(src, `http: {url: "https://psp.example.com/notify"}`, tt.sink[1:len(tt.sink)-1], 1)
			if tt.key != "" {
				src = strings.Replace(src, "    sink:", "    key: "+tt.key+"\n    sink:", 1)
			}
			if tt.pushback != "" {
				src = strings.Replace(src, "    sink:", "    pushback: "+tt.pushback+"\n    sink:", 1)
			}
			if tt.source != "" {
				src = strings.Replace(src, "nats: {url: nats://127.0.0.1:4222, subject: callbacks.psp, stream: CALLBACKS}", tt.source, 1)
			}
			cfg, err := Parse([]byte(src), env(nil))
			if err != nil {
				t.Fatalf("Parse:\n%s\n%v", src, err)
			}
			p := cfg.Pipelines[0]
			if got := p.AdaptsSharedLimit(); got != tt.adaptsPipe {
				t.Errorf("AdaptsSharedLimit() = %v; want %v", got, tt.adaptsPipe)
			}
			c, lanes, ok := p.SharedDestinations()
			if ok != tt.shared || lanes != tt.lanes {
				t.Fatalf("SharedDestinations() = (_, %v, %v); want (_, %v, %v)", lanes, ok, tt.lanes, tt.shared)
			}
			if !ok {
				return
			}
			got := fmt.Sprintf("%s %v %v %v", c.Key, c.Limit, c.FallbackLimit, c.AtLimitEvery > 0)
			if want := fmt.Sprintf("%s %v %v %v", tt.prefix, tt.limit, tt.fall, tt.every); got != want {
				t.Errorf("SharedDestinations(): prefix, limit, fallback, at-limit sparing = %s; want %s", got, want)
			}
		})
	}
}
