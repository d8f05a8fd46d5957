// Package config is the daemon's configuration file: its shape, and the
// loader that reads it. It composes; each part owns its own keys, their
// defaults and their rules, next to the code that uses them:
//
//   - source.kafka, source.nats: [sources.KafkaConfig], [sources.NATSConfig];
//   - bucket, rate (with rate.adaptive) and the delivery keys of every sink
//     (timeout, max_in_flight, retry, breaker): [shaper.BucketConfig],
//     [shaper.RateConfig], [shaper.DeliveryConfig];
//   - rate.shared: [limiter.SharedOptions];
//   - sink.http, sink.nats, sink.kafka and dead_letter: [sinks.HTTPConfig],
//     [sinks.NATSConfig], [sinks.KafkaConfig], [sinks.NATSPublisherConfig],
//     [sinks.KafkaPublisherConfig].
//
// What is left here is the file's own keys (admin, shutdown, tuning, the
// pipeline list and its names) and the rules that span parts: exactly one source
// and one sink, a unique name, a fallback limit below the shared one.
//
// [Load] reads a file in one pass: an unknown key, a wrong type, an unset
// ${VAR} and every validation problem are reported together, each with its
// place in the file and its key path:
//
//	shaper.yaml:12:7: pipelines[0].rate.limit: must be a number > 0, got 0
//
// [LoadWith] with SkipEnv checks a file without its secrets, and [Schema]
// is the file's JSON Schema, reflected from [File], for editors.
package config

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/tuning"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// File is the whole configuration file of a shaper daemon.
type File struct {
	// Admin is the HTTP server for metrics, health and the pipelines API.
	Admin AdminConfig `yaml:"admin"`
	// Shutdown bounds the graceful drain.
	Shutdown ShutdownConfig `yaml:"shutdown"`
	// Tuning is what the daemon does to the Go runtime for paced
	// delivery (docs/tuning.md): on (the default) or off. Off waits on Go
	// timers, leaves GOMAXPROCS and GOGC to the runtime and reads and
	// writes through net.Conn. SHAPER_TUNING in the environment wins over
	// it. Read when the daemon starts; a reload does not change it.
	Tuning string `yaml:"tuning"`
	// Pipelines run side by side, each from one source to one sink.
	Pipelines []Pipeline `yaml:"pipelines"`
}

// AdminConfig configures the admin HTTP server.
type AdminConfig struct {
	// Listen is the host:port of /metrics, /healthz, /readyz and /v1/pipelines.
	// Default 127.0.0.1:9090. An empty host listens on every interface.
	Listen string `yaml:"listen"`
	// Token, when set, must be sent as "Authorization: Bearer <token>" on
	// mutating calls (PUT and POST), on loopback too; at least 16 bytes.
	// Without a token those calls are refused (403): the admin API is
	// read-only. Reading endpoints never need it. Required when Listen is
	// not a loopback address (127.0.0.0/8, ::1, localhost). Use ${VAR}.
	Token string `yaml:"token"`
	// AllowedHosts are names by which the admin server is reached besides
	// its listen host, loopback (localhost, 127.0.0.0/8, ::1) and the
	// address a request arrives on (a probe or a scrape by pod IP): the
	// name of an ingress, a Kubernetes Service or a compose service in
	// front of it. Each is a host name or address, with a port (that port
	// only) or without (any port). A request with any other Host is
	// answered 421, against DNS rebinding. Default none.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// ShutdownConfig configures the graceful drain on SIGTERM or SIGINT.
type ShutdownConfig struct {
	// DrainTimeout is how long the bucket keeps draining after the signal
	// before what remains is nacked. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// Pipeline is one source, one bucket, one rate and one sink.
type Pipeline struct {
	// Name labels the pipeline's metrics and its admin API path. Required,
	// unique, letters, digits, '-', '_' and '.'.
	Name string `yaml:"name"`
	// Source is where messages come from: exactly one of its fields.
	Source Source `yaml:"source"`
	// Bucket bounds how many messages wait and for how long.
	Bucket shaper.BucketConfig `yaml:"bucket"`
	// Rate is how fast messages leave the bucket.
	Rate Rate `yaml:"rate"`
	// Key, when set, gives each message a key and each key a lane of the
	// bucket; lanes take turns. Left out with sink.http.url_from, each
	// destination is a lane (as key.from: host).
	Key *shaper.KeyConfig `yaml:"key"`
	// Pushback is what a sink's push-back (a Retry-After pause, the
	// circuit breaker, rate.adaptive) holds back: the destination that
	// answered (default), or with scope: key the key's lane.
	Pushback shaper.PushbackConfig `yaml:"pushback"`
	// Sink is where messages go: exactly one of its fields.
	Sink Sink `yaml:"sink"`
	// DeadLetter is where undeliverable messages go: exactly one of its
	// fields, or left out (then they are nacked for redelivery and logged).
	DeadLetter *DeadLetter `yaml:"dead_letter"`
}

// Source selects the source of a pipeline.
type Source struct {
	// Kafka consumes a topic as a member of a consumer group.
	Kafka *sources.KafkaConfig `yaml:"kafka"`
	// NATS consumes a subject: JetStream when Stream is set, else core NATS.
	NATS *sources.NATSConfig `yaml:"nats"`
}

// Rate is the limiter's keys: the rate itself, and where it is shared.
type Rate struct {
	shaper.RateConfig `yaml:",inline"`
	// Shared, when set, makes Limit one global limit for every replica with
	// the same Shared.Key, kept in Redis.
	Shared *limiter.SharedOptions `yaml:"shared"`
}

// KeyLimiter returns what makes one key's own limiter under a defaulted,
// validated rate.per_key, on this replica alone, or nil without one. (With
// rate.shared, cmd/shaper shares it through Redis instead.)
func (r Rate) KeyLimiter() func(key string, now time.Time) shaper.Limiter {
	pk := r.PerKey
	if pk == nil {
		return nil
	}
	cfg := limiter.Config{Mode: limiter.Mode(r.Mode), Limit: pk.Limit, Burst: *pk.Burst}
	return func(_ string, now time.Time) shaper.Limiter {
		l, err := limiter.New(cfg, now)
		if err != nil {
			panic("config: rate.per_key was not validated: " + err.Error())
		}
		return l
	}
}

// DestinationLimiter returns what makes one destination's own limiter for
// rate.adaptive to move, at its ceiling, on this replica alone:
// rate.per_key's limit and burst when set, else rate.limit's; nil without
// rate.adaptive. (With rate.shared, cmd/shaper shares it through Redis
// instead, or moves the pipeline's shared limit: see SharedDestinations.)
func (r Rate) DestinationLimiter() func(name string, now time.Time) shaper.Limiter {
	if r.Adaptive == nil {
		return nil
	}
	cfg := limiter.Config{Mode: limiter.Mode(r.Mode), Limit: r.Limit, Burst: *r.Burst}
	if pk := r.PerKey; pk != nil {
		cfg.Limit, cfg.Burst = pk.Limit, *pk.Burst
	}
	return func(_ string, now time.Time) shaper.Limiter {
		l, err := limiter.New(cfg, now)
		if err != nil {
			panic("config: rate was not validated: " + err.Error())
		}
		return l
	}
}

// SharedKeys is the config of the per-key limits shared through Redis
// under rate.shared, or false when they are not: without rate.per_key or
// rate.shared, or when each key lives in one Kafka partition (key.from:
// kafka_key), so that the replica that owns the partition owns the key and
// a local limit is already global. A key's fallback limit is scaled as
// fallback_limit scales rate.limit.
func (p Pipeline) SharedKeys() (limiter.SharedConfig, bool) {
	pk, sh := p.Rate.PerKey, p.Rate.Shared
	if pk == nil || sh == nil || p.Source.Kafka != nil && p.Key.From == "kafka_key" {
		return limiter.SharedConfig{}, false
	}
	return limiter.SharedConfig{
		Key: sh.Key + ":key:", Mode: limiter.Mode(p.Rate.Mode), Limit: pk.Limit, Burst: *pk.Burst,
		FallbackLimit: pk.Limit * min(1, sh.FallbackLimit/p.Rate.Limit), Timeout: sh.Timeout,
	}, true
}

// SharedDestinations is the config of each destination's adaptive limit
// shared through Redis, under rate.shared and rate.adaptive, or false when
// it is not: without either; with one destination (a fixed sink.http.url,
// pushback.scope: destination), whose adaptive limit is the pipeline's
// shared one (see AdaptsSharedLimit); or when each lane is its destination
// (pushback.scope: key) and lives in one Kafka partition (key.from:
// kafka_key), so that a local limit is already global. A destination's key
// is <shared.key>:dest:<destination>, its limit its ceiling (rate.per_key's
// when set, else rate.limit), and while its rate is at the ceiling it
// calls Redis only every 250 ms (the adaptive rate's tick), to learn
// whether another replica lowered it: at the ceiling another limit holds
// it already (rate.limit, shared), so only a destination pushed back
// costs a Redis call per request to it.
//
// lanes reports that the destinations are the lanes of rate.per_key
// (key.from: host, or pushback.scope: key, with per-key limits shared):
// then one Redis key per lane holds both, the per-key one
// (<shared.key>:key:<key>), at rate.per_key.limit and with no call spared,
// and the lanes need no limiter of their own.
func (p Pipeline) SharedDestinations() (cfg limiter.SharedConfig, lanes, ok bool) {
	r, sh := p.Rate, p.Rate.Shared
	k := p.lanes()
	byLane := p.destinationsAreLanes()
	if r.Adaptive == nil || sh == nil || p.AdaptsSharedLimit() || byLane && p.Source.Kafka != nil && k.From == "kafka_key" {
		return limiter.SharedConfig{}, false, false
	}
	if keys, shared := p.SharedKeys(); shared && byLane {
		return keys, true, true
	}
	cfg = limiter.SharedConfig{
		Key: sh.Key + ":dest:", Mode: limiter.Mode(r.Mode), Limit: r.Limit, Burst: *r.Burst,
		Timeout: sh.Timeout, AtLimitEvery: 250 * time.Millisecond,
	}
	if pk := r.PerKey; pk != nil {
		cfg.Limit, cfg.Burst = pk.Limit, *pk.Burst
	}
	cfg.FallbackLimit = cfg.Limit * min(1, sh.FallbackLimit/r.Limit)
	return cfg, false, true
}

// AdaptsSharedLimit reports whether rate.adaptive moves the pipeline's
// shared limit (rate.shared) rather than each destination's: there is one
// destination, so the two are one, and the pipeline's limit is leased.
func (p Pipeline) AdaptsSharedLimit() bool {
	return p.Rate.Adaptive != nil && p.Rate.Shared != nil && !p.destinationsAreLanes() &&
		(p.Sink.HTTP == nil || p.Sink.HTTP.URLFrom == "")
}

// destinationsAreLanes reports whether each lane is its own destination:
// key.from: host (or url_from without key:), or pushback.scope: key.
func (p Pipeline) destinationsAreLanes() bool {
	k := p.lanes()
	return k != nil && (k.From == "host" || p.Pushback.Scope == shaper.ScopeKey)
}

// Sink selects the sink of a pipeline.
type Sink struct {
	// HTTP sends each message as one HTTP request.
	HTTP *sinks.HTTPConfig `yaml:"http"`
	// Kafka publishes each message to a topic (shaping into a topic).
	Kafka *sinks.KafkaConfig `yaml:"kafka"`
	// NATS publishes each message to a subject (shaping into a subject).
	NATS *sinks.NATSConfig `yaml:"nats"`
}

// DeadLetter selects the dead-letter target.
type DeadLetter struct {
	// Kafka publishes dead letters to a topic.
	Kafka *sinks.KafkaPublisherConfig `yaml:"kafka"`
	// NATS publishes dead letters to a subject.
	NATS *sinks.NATSPublisherConfig `yaml:"nats"`
}

// Defaults and bounds of the file's own keys.
const (
	DefaultAdminListen  = "127.0.0.1:9090"
	DefaultDrainTimeout = 30 * time.Second
	// MinAdminToken is the shortest admin.token accepted, in bytes.
	MinAdminToken = 16
)

// lanes is the key that gives each message its lane: key:, or with
// sink.http.url_from and no key:, the destination (key.from: host); nil
// for one lane.
func (p *Pipeline) lanes() *shaper.KeyConfig {
	k := p.Key
	if k == nil && p.Sink.HTTP != nil && p.Sink.HTTP.URLFrom != "" {
		k = &shaper.KeyConfig{From: "host"}
		k.SetDefaults()
	}
	if k != nil && k.From == "host" && p.Sink.HTTP != nil {
		kv := *k
		kv.URLFrom, kv.MaxInFlight = p.Sink.HTTP.URLFrom, p.Sink.HTTP.MaxInFlightPerHost
		k = &kv
	}
	return k
}

// handsBackByDefault reports whether bucket.per_key_capacity left out is a
// quarter of the capacity: the pipeline keeps lanes (key:, or url_from) and
// its source can take a full lane's messages back (Kafka pauses the
// partition, JetStream redelivers later; core NATS could not, and JetStream
// would reorder an ordered key's). A destination that pushes back then
// holds at most a quarter of the bucket.
func (p *Pipeline) handsBackByDefault() bool {
	k := p.lanes()
	nats := p.Source.NATS
	return k != nil && (nats == nil || nats.Stream != "" && !k.Ordered)
}

// validateKey checks key: against the parts it needs: the source that
// carries the key, and one that can take a full key's messages back.
func (p *Pipeline) validateKey(path string) error {
	var ps check.Problems
	handsBack := p.Bucket.PerKeyCapacity < p.Bucket.Capacity
	k := p.lanes()
	switch p.Pushback.Scope {
	case shaper.ScopeDestination:
	case shaper.ScopeKey:
		if p.Key == nil {
			ps.Add(path+".pushback.scope", "key needs key: (whose lane a push-back holds)")
		}
	default:
		ps.Add(path+".pushback.scope", "want destination or key, got %q", p.Pushback.Scope)
	}
	if k == nil {
		if handsBack {
			ps.Add(path+".bucket.per_key_capacity", "needs key: (which messages share a lane)")
		}
		if p.Rate.PerKey != nil {
			ps.Add(path+".rate.per_key", "needs key: (what a key is)")
		}
		return ps.Err()
	}
	ps.Also(k.Validate(path + ".key"))
	nats := p.Source.NATS
	if k.From == "kafka_key" && nats != nil {
		ps.Add(path+".key.from", "kafka_key needs source.kafka: NATS messages have no key; use header:NAME or json:a.b.c")
	}
	switch {
	case !handsBack || nats == nil:
	case nats.Stream == "":
		ps.Add(path+".bucket.per_key_capacity", "needs a source that takes messages back (source.kafka, or source.nats with stream): core NATS would lose a full key's messages")
	case k.Ordered:
		ps.Add(path+".bucket.per_key_capacity", "with key.ordered on JetStream would reorder a key's messages (those handed back come again after newer ones): leave it out (it is then the capacity)")
	}
	return ps.Err()
}

// Pending is how many messages a JetStream durable may have out, unsettled
// (its MaxAckPending): the bucket's capacity, or -1 (no bound) in two cases.
// When full lanes hand messages back, the source keeps them pending while
// other keys' messages get past them. Under rate.shared, replicas share the
// durable, and MaxAckPending counts the unsettled messages of all of them:
// one bucket's worth for the fleet would leave most replicas a trickle, one
// message per ack, and each would lease slots of the shared rate it has no
// messages for. Shaper's memory stays bounded by the capacity either way:
// each replica fetches no more than its bucket has room for.
func (p Pipeline) Pending() int {
	if p.lanes() != nil && p.Bucket.PerKeyCapacity < p.Bucket.Capacity || p.Rate.Shared != nil {
		return -1
	}
	return p.Bucket.Capacity
}

// Core is the pipeline's config for shaper.New: name, bucket, rate and the
// delivery settings of its sink.
func (p Pipeline) Core() shaper.PipelineConfig {
	return shaper.PipelineConfig{Name: p.Name, Bucket: p.Bucket, Rate: p.Rate.RateConfig, Delivery: p.Sink.Delivery(), Key: p.lanes(), Pushback: p.Pushback}
}

// Delivery returns the delivery settings of whichever sink is configured.
func (s Sink) Delivery() shaper.DeliveryConfig {
	switch {
	case s.HTTP != nil:
		return s.HTTP.DeliveryConfig
	case s.NATS != nil:
		return s.NATS.DeliveryConfig
	case s.Kafka != nil:
		return s.Kafka.DeliveryConfig
	}
	return shaper.DeliveryConfig{}
}

// SetDefaults fills every field left out with its default. Load calls it
// before Validate; a program building a File in code calls it too.
func (f *File) SetDefaults() {
	if f.Admin.Listen == "" {
		f.Admin.Listen = DefaultAdminListen
	}
	if f.Shutdown.DrainTimeout == 0 {
		f.Shutdown.DrainTimeout = DefaultDrainTimeout
	}
	if f.Tuning == "" {
		f.Tuning = tuning.On
	}
	for i := range f.Pipelines {
		f.Pipelines[i].SetDefaults()
	}
}

// SetDefaults fills every field of the pipeline left out with its default.
func (p *Pipeline) SetDefaults() {
	if n := p.Source.NATS; n != nil {
		n.SetDefaults(p.Name)
	}
	if k := p.Source.Kafka; k != nil {
		k.Pipeline = p.Name
		k.SetDefaults()
	}
	perKeyLeftOut := p.Bucket.PerKeyCapacity == 0
	p.Bucket.SetDefaults()
	p.Rate.SetDefaults()
	if p.Pushback.Scope == "" {
		p.Pushback.Scope = shaper.ScopeDestination
	}
	if p.Key != nil {
		p.Key.SetDefaults()
	}
	if perKeyLeftOut && p.handsBackByDefault() {
		p.Bucket.PerKeyCapacity = max(p.Bucket.Capacity/4, 1)
	}
	if sh := p.Rate.Shared; sh != nil {
		sh.SetDefaults(p.Name)
	}
	if h := p.Sink.HTTP; h != nil {
		h.SetDefaults()
	}
	if n := p.Sink.NATS; n != nil {
		n.SetDefaults()
	}
	if k := p.Sink.Kafka; k != nil {
		k.SetDefaults()
	}
	if dl := p.DeadLetter; dl != nil && dl.Kafka != nil {
		dl.Kafka.SetDefaults()
	}
}

// Validate reports every problem of a defaulted file at once, joined, each
// as "key.path: what is wrong".
func (f *File) Validate() error {
	var ps check.Problems
	f.Admin.validate(&ps)
	if f.Shutdown.DrainTimeout < 0 {
		ps.Add("shutdown.drain_timeout", "must be >= 0, got %s", f.Shutdown.DrainTimeout)
	}
	if _, err := tuning.ParseConfig(f.Tuning); err != nil {
		ps.Add("tuning", "%v", err)
	}
	if len(f.Pipelines) == 0 {
		ps.Add("pipelines", "at least one pipeline is required")
	}
	names := map[string]int{}
	for i := range f.Pipelines {
		p := &f.Pipelines[i]
		path := fmt.Sprintf("pipelines[%d]", i)
		if j, dup := names[p.Name]; dup && p.Name != "" {
			ps.Add(path+".name", "%q is already the name of pipelines[%d]", p.Name, j)
		}
		names[p.Name] = i
		ps.Also(p.Validate(path))
	}
	return ps.Err()
}

func (a AdminConfig) validate(ps *check.Problems) {
	host, port, err := net.SplitHostPort(a.Listen)
	switch {
	case err != nil || port == "":
		ps.Add("admin.listen", "want host:port, got %q", a.Listen)
	case a.Token != "" && len(a.Token) < MinAdminToken:
		ps.Add("admin.token", "must be at least %d bytes, got %d: a short token can be guessed", MinAdminToken, len(a.Token))
	case a.Token == "" && !check.IsLoopback(host):
		where := fmt.Sprintf("admin.listen host %q is not a loopback address (127.0.0.0/8, ::1, localhost)", host)
		if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
			where = fmt.Sprintf("admin.listen %q listens on every interface", a.Listen)
		}
		ps.Add("admin.token", "required: %s; set token: ${SHAPER_ADMIN_TOKEN} (at least %d bytes), or listen on 127.0.0.1 "+
			"(without a token the admin API is read-only: PUT /v1/pipelines/{name}/rate, pause and resume answer 403)", where, MinAdminToken)
	}
	for i, h := range a.AllowedHosts {
		if !shaper.ValidAdminHost(h) {
			ps.Add(fmt.Sprintf("admin.allowed_hosts[%d]", i), "want a host name or address, with or without :port (such as shaper.monitoring.svc or shaper:9090), got %q", h)
		}
	}
}

// Validate reports every problem of a defaulted pipeline at key path path:
// each part's own, and exactly one source and one sink.
func (p *Pipeline) Validate(path string) error {
	var ps check.Problems
	ps.Also(shaper.ValidateName(path+".name", p.Name))

	sp := path + ".source"
	if (p.Source.Kafka == nil) == (p.Source.NATS == nil) {
		ps.Add(sp, "exactly one of kafka or nats is required")
	}
	if k := p.Source.Kafka; k != nil {
		ps.Also(k.Validate(sp + ".kafka"))
	}
	if n := p.Source.NATS; n != nil {
		ps.Also(n.Validate(sp + ".nats"))
	}

	ps.Also(p.Bucket.Validate(path + ".bucket"))
	ps.Also(p.validateKey(path))
	ps.Also(p.Rate.Validate(path+".rate", p.Bucket.MaxQueueTime))
	if sh := p.Rate.Shared; sh != nil {
		ps.Also(sh.Validate(path+".rate.shared", p.Rate.Limit))
	}

	kp := path + ".sink"
	sinks := 0
	if h := p.Sink.HTTP; h != nil {
		sinks++
		ps.Also(h.Validate(kp + ".http"))
	}
	if n := p.Sink.NATS; n != nil {
		sinks++
		ps.Also(n.Validate(kp + ".nats"))
	}
	if k := p.Sink.Kafka; k != nil {
		sinks++
		ps.Also(k.Validate(kp + ".kafka"))
	}
	if sinks != 1 {
		ps.Add(kp, "exactly one of http, kafka or nats is required")
	}

	if dl := p.DeadLetter; dl != nil {
		dp := path + ".dead_letter"
		if (dl.NATS == nil) == (dl.Kafka == nil) {
			ps.Add(dp, "exactly one of kafka or nats is required (or leave dead_letter out)")
		}
		if dl.NATS != nil {
			ps.Also(dl.NATS.Validate(dp + ".nats"))
		}
		if dl.Kafka != nil {
			ps.Also(dl.Kafka.Validate(dp + ".kafka"))
		}
	}
	return ps.Err()
}
