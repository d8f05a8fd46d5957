package config

import (
	"fmt"
	"net/url"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/sinks"
)

// SecretKeys returns the key paths of the config's values that are
// credentials: the admin token, passwords, the signing secret, credentials
// in URLs and the values of sensitive sink headers (sinks.SensitiveHeader). Whoever
// can write the config file can read them, or send them elsewhere by
// changing a URL, so the daemon warns when such a file is writable by others.
func (c *File) SecretKeys() []string {
	var keys []string
	add := func(path, value string) {
		if value != "" {
			keys = append(keys, path)
		}
	}
	add("admin.token", c.Admin.Token)
	kafka := func(path string, k *kafkaconn.Config) {
		if k != nil && k.SASL != nil {
			add(path+".sasl.password", k.SASL.Password)
		}
	}
	natsURL := func(path, raw string) {
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			keys = append(keys, path)
		}
	}
	for i, p := range c.Pipelines {
		path := fmt.Sprintf("pipelines[%d]", i)
		if k := p.Source.Kafka; k != nil {
			kafka(path+".source.kafka", &k.Config)
		}
		if n := p.Source.NATS; n != nil {
			natsURL(path+".source.nats.url", n.URL)
		}
		if sh := p.Rate.Shared; sh != nil {
			add(path+".rate.shared.redis.password", sh.Redis.Password)
		}
		if h := p.Sink.HTTP; h != nil {
			if u, err := url.Parse(h.URL); err == nil && (u.User != nil || u.RawQuery != "") {
				keys = append(keys, path+".sink.http.url")
			}
			for name, value := range h.Headers {
				if sinks.SensitiveHeader(name) {
					add(check.Join(path+".sink.http.headers", name), value)
				}
			}
			if h.Signing != nil {
				add(path+".sink.http.signing.secret", h.Signing.Secret)
			}
		}
		if k := p.Sink.Kafka; k != nil {
			kafka(path+".sink.kafka", &k.Config)
		}
		if n := p.Sink.NATS; n != nil {
			natsURL(path+".sink.nats.url", n.URL)
		}
		if dl := p.DeadLetter; dl != nil {
			if dl.Kafka != nil {
				kafka(path+".dead_letter.kafka", &dl.Kafka.Config)
			}
			if dl.NATS != nil {
				natsURL(path+".dead_letter.nats.url", dl.NATS.URL)
			}
		}
	}
	return keys
}
