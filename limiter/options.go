package limiter

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/check"
	"github.com/shaper-dev/shaper/internal/tlsconf"
)

// SharedOptions are the keys of a config file's rate.shared: where Redis
// is and how this replica shares the limit through it. NewSharedFrom turns
// them, with the rate, into a running Shared.
type SharedOptions struct {
	// Redis is where the shared limiter state lives.
	Redis RedisConfig `yaml:"redis"`
	// Key is the Redis key of the shared state; replicas with the same key
	// share one limit. Default "shaper:<pipeline name>".
	Key string `yaml:"key"`
	// FallbackLimit is this replica's own limit while Redis cannot be
	// reached (never unlimited). Required, > 0 and <= limit; set it to
	// limit / replicas to keep the total within the contract.
	FallbackLimit float64 `yaml:"fallback_limit"`
	// Timeout bounds each Redis call; past it the replica falls back.
	// Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
}

// RedisConfig is how to reach Redis: one server, a Sentinel set, or a Cluster.
type RedisConfig struct {
	// Addr is host:port of a single Redis server. Exactly one of Addr and
	// Addrs is required.
	Addr string `yaml:"addr"`
	// Addrs are Sentinel addresses (with MasterName) or Cluster seed nodes
	// (without it).
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master's name; it makes Addrs Sentinels.
	MasterName string `yaml:"master_name"`
	// Username and Password authenticate (Redis 6 ACL; Password alone for
	// requirepass). Use ${VAR} for the password.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// DB is the database number; 0 (the default) with a Cluster.
	DB int `yaml:"db"`
	// TLS, when present (even empty), encrypts the connection.
	TLS *tlsconf.Config `yaml:"tls"`
}

// SetDefaults fills every field left out with its default, for the
// pipeline called pipeline.
func (o *SharedOptions) SetDefaults(pipeline string) {
	if o.Key == "" {
		o.Key = "shaper:" + pipeline
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultSharedTimeout
	}
	o.Redis.TLS.SetDefaults()
}

// Validate reports every problem of defaulted options at key path path,
// for a shared limit of limit.
func (o *SharedOptions) Validate(path string, limit float64) error {
	var ps check.Problems
	ps.Also(o.Redis.Validate(path + ".redis"))
	if o.Key == "" {
		ps.Add(path+".key", "required")
	}
	if !(o.FallbackLimit > 0) || math.IsInf(o.FallbackLimit, 0) {
		ps.Add(path+".fallback_limit", "must be > 0 (a replica never sends unlimited), got %v", o.FallbackLimit)
	} else if o.FallbackLimit > limit {
		ps.Add(path+".fallback_limit", "must be <= rate.limit (%v), got %v", limit, o.FallbackLimit)
	}
	ps.Positive(path+".timeout", o.Timeout)
	return ps.Err()
}

// Validate reports every problem of r at key path path.
func (r RedisConfig) Validate(path string) error {
	var ps check.Problems
	switch {
	case r.Addr == "" && len(r.Addrs) == 0:
		ps.Add(path, "exactly one of addr or addrs is required")
	case r.Addr != "" && len(r.Addrs) > 0:
		ps.Add(path, "exactly one of addr or addrs is allowed, got both")
	}
	if r.Addr != "" {
		ps.HostPort(path+".addr", r.Addr)
	}
	for i, a := range r.Addrs {
		ps.HostPort(fmt.Sprintf("%s.addrs[%d]", path, i), a)
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		ps.Add(path+".master_name", "needs addrs: the Sentinel addresses")
	}
	if r.DB < 0 {
		ps.Add(path+".db", "must be >= 0, got %d", r.DB)
	} else if r.DB != 0 && len(r.Addrs) > 0 && r.MasterName == "" {
		ps.Add(path+".db", "must be 0 with a Cluster (addrs without master_name), got %d", r.DB)
	}
	ps.Also(r.TLS.Validate(path + ".tls"))
	return ps.Err()
}

// Addresses returns the addresses of r: Addr, or Addrs.
func (r RedisConfig) Addresses() []string {
	if r.Addr != "" {
		return []string{r.Addr}
	}
	return r.Addrs
}

// Client returns a Redis client for r whose calls the caller bounds with
// timeout (by its context): go-redis neither retries a command nor dials
// more than once for one, and waits past the timeout for neither.
func (r RedisConfig) Client(timeout time.Duration) (redis.UniversalClient, error) {
	tlsCfg, err := tlsconf.Client(r.TLS)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:      r.Addresses(),
		MasterName: r.MasterName,
		Username:   r.Username,
		Password:   r.Password,
		DB:         r.DB,
		TLSConfig:  tlsCfg,
		// The limiter bounds every call by its own timeout and falls back;
		// go-redis must not retry behind its back: no command retries (-1,
		// as 0 means the default 3), and one dial per call, where the
		// default of five dials 100ms apart kept a replica whose Redis
		// refused connections waiting 400ms, or its whole timeout.
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           max(timeout, time.Second),
		ContextTimeoutEnabled: true, // a hung call ends at the limiter's timeout
	}), nil
}

// OwnedShared is a Shared together with the Redis client it made and
// owns, and the per-key limits it made on that client; Close closes the
// limiter and the client.
type OwnedShared struct {
	*Shared
	client redis.UniversalClient

	mu   sync.Mutex
	keys []*SharedKeys
}

// Close stops the limiter and closes its Redis client.
func (s *OwnedShared) Close() error {
	return errors.Join(s.Shared.Close(), s.client.Close())
}

// Keys returns per-key limits of cfg (see NewSharedKeys) through s's Redis
// client.
func (s *OwnedShared) Keys(cfg SharedConfig) (*SharedKeys, error) {
	k, err := NewSharedKeys(s.client, cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, k)
	return k, nil
}

// Unused returns the slots the limiter and the per-key limits made by
// Keys have let pass or given back unused since they started.
func (s *OwnedShared) Unused() int64 {
	n := s.Shared.Unused()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		n += k.Unused()
	}
	return n
}

// NewSharedFrom connects to Redis as o says and returns the shared limiter
// of rate local (mode, limit and burst) under o, which owns its client.
// log receives what SharedConfig.Logger would.
func NewSharedFrom(o SharedOptions, local Config, log *slog.Logger, now time.Time) (*OwnedShared, error) {
	client, err := o.Redis.Client(o.Timeout)
	if err != nil {
		return nil, err
	}
	s, err := NewShared(client, SharedConfig{
		Key: o.Key, Mode: local.Mode, Limit: local.Limit, Burst: local.Burst,
		FallbackLimit: o.FallbackLimit, Timeout: o.Timeout, Logger: log,
	}, now)
	if err != nil {
		_ = client.Close() // the config error is what matters
		return nil, err
	}
	return &OwnedShared{Shared: s, client: client}, nil
}
