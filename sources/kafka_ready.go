package sources

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

const (
	// kafkaProbeMin and kafkaProbeMax bound the backoff between probes of
	// the cluster while the source is not ready. A ready source does not
	// probe: kafka-go reports its own errors.
	kafkaProbeMin = 200 * time.Millisecond
	kafkaProbeMax = 5 * time.Second
	// kafkaProbeTimeout bounds one probe.
	kafkaProbeTimeout = 10 * time.Second
)

// Readiness states of kafkaHealth.
const (
	healthUnknown = iota // before the first probe
	healthReady
	healthNotReady
)

// kafkaHealth tells whether a Kafka source is fetching normally, and if not,
// why. kafka-go's consumer group and partition readers retry everything
// internally and only log, so kafkaHealth takes the errors they log (their
// ErrorLogger) and those the readers return, and, while they come, probes
// the cluster itself with a metadata request for the topic from the
// goroutine watch, with backoff: the probe names the problem (brokers
// unreachable, SASL authentication failed, topic not found). The source is
// ready again once a probe succeeds and kafka-go has reported no error since
// the previous probe.
//
// It logs once per transition between ready and not ready. kafka-go's own
// messages go to the debug level.
type kafkaHealth struct {
	cfg    KafkaConfig
	dialer *kafka.Dialer
	log    *slog.Logger

	wakeCh   chan struct{} // size 1: the reader reported an error, or recovered
	notReady atomic.Bool   // mirrors state != healthReady for fetched
	closing  atomic.Bool   // errors of a closing reader say nothing of its health

	mu        sync.Mutex
	state     int
	err       error  // why not ready
	readerErr error  // the reader's last error
	readerSeq uint64 // counts the reader's errors
	broken    error  // the reader cannot be created: not ready for good
}

func newKafkaHealth(cfg KafkaConfig, dialer *kafka.Dialer, log *slog.Logger) *kafkaHealth {
	h := &kafkaHealth{
		cfg:    cfg,
		dialer: dialer,
		log:    log,
		wakeCh: make(chan struct{}, 1),
		err:    fmt.Errorf("kafka: connecting to brokers %s", strings.Join(cfg.Brokers, ",")),
	}
	h.notReady.Store(true)
	return h
}

// ready returns nil while the source is ready, else why not.
func (h *kafkaHealth) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == healthReady {
		return nil
	}
	return h.err
}

// readerInfo is kafka-go's Logger. A fetch that waited MaxWait for nothing
// is not worth a line, even at debug level.
func (h *kafkaHealth) readerInfo(format string, args ...any) {
	if strings.HasPrefix(format, "no messages received from kafka within the allocated time") {
		return
	}
	if h.log.Enabled(context.Background(), slog.LevelDebug) {
		h.log.Debug("kafka-go: " + strings.TrimSpace(fmt.Sprintf(format, args...)))
	}
}

// readerError is kafka-go's ErrorLogger. A rebalance in progress, and
// partition readers canceled by the end of a generation, are how a group
// works, not errors.
func (h *kafkaHealth) readerError(format string, args ...any) {
	text := strings.TrimSpace(fmt.Sprintf(format, args...))
	h.log.Debug("kafka-go: " + text)
	for _, a := range args {
		if err, ok := a.(error); ok && (errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, context.Canceled) || errors.Is(err, kafka.ErrGenerationEnded)) {
			return
		}
	}
	h.record(fmt.Errorf("kafka: group %q: %s", h.cfg.Group, text))
}

// fail makes the source not ready for good: the consumer group cannot be
// created.
func (h *kafkaHealth) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broken = err
	h.state = healthNotReady
	h.err = err
	h.notReady.Store(true)
	h.log.Error("kafka: cannot join the consumer group", "err", err)
}

// fetchError records an error a partition reader returned.
func (h *kafkaHealth) fetchError(err error) {
	h.log.Debug("kafka: fetch", "err", err)
	h.record(fmt.Errorf("kafka: fetch from topic %q: %w", h.cfg.Topic, err))
}

// fetched is called for every message fetched: while the source is not
// ready, it makes watch probe at once rather than after its backoff.
func (h *kafkaHealth) fetched() {
	if h.notReady.Load() {
		h.wake()
	}
}

// record takes an error of the reader: a ready source is not ready any more,
// and watch probes at once.
func (h *kafkaHealth) record(err error) {
	if h.closing.Load() {
		return
	}
	h.mu.Lock()
	if h.broken != nil {
		h.mu.Unlock()
		return
	}
	h.readerSeq++
	h.readerErr = err
	if h.state == healthReady {
		h.setLocked(err)
	}
	h.mu.Unlock()
	h.wake()
}

func (h *kafkaHealth) wake() {
	select {
	case h.wakeCh <- struct{}{}:
	default:
	}
}

// setLocked changes the state to ready (err nil) or not ready, and logs a
// transition. It requires that h.mu is held.
func (h *kafkaHealth) setLocked(err error) {
	switch {
	case err == nil && h.state != healthReady:
		h.log.Info("kafka: source ready")
		h.state = healthReady
	case err != nil && h.state != healthNotReady:
		h.log.Warn("kafka: source not ready", "err", err)
		h.state = healthNotReady
	case err != nil && err.Error() != h.err.Error():
		h.log.Debug("kafka: source not ready", "err", err)
	}
	h.err = err
	h.notReady.Store(h.state != healthReady)
}

// watch probes the cluster until ctx ends: at once, then with backoff while
// the source is not ready; a ready source waits for the reader to report an
// error. It calls seen after every probe that saw the topic.
func (h *kafkaHealth) watch(ctx context.Context, seen func()) {
	backoff := kafkaProbeMin
	var seenSeq uint64
	for {
		pctx, cancel := context.WithTimeout(ctx, kafkaProbeTimeout)
		err := h.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			seen()
		}
		h.mu.Lock()
		if h.broken != nil {
			h.mu.Unlock()
			return // nothing will change
		}
		if err == nil && h.readerSeq != seenSeq {
			// The cluster answers, but the reader failed since the last
			// probe: not ready until it stops failing for one probe.
			err = h.readerErr
		}
		seenSeq = h.readerSeq
		h.setLocked(err)
		h.mu.Unlock()

		if err == nil {
			backoff = kafkaProbeMin
			select {
			case <-h.wakeCh:
				continue
			case <-ctx.Done():
				return
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
			backoff = min(2*backoff, kafkaProbeMax)
		case <-h.wakeCh:
			// A new reader error, or a fetched message: probe now, but
			// keep the backoff.
			t.Stop()
			if err := sleepCtx(ctx, kafkaProbeMin); err != nil {
				return
			}
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// probe asks the brokers, one after the other, for the topic's partitions,
// and returns nil when one answers with at least one partition, or an error
// naming the problem.
func (h *kafkaHealth) probe(ctx context.Context) error {
	var unreachable []string
	var first error
	for _, b := range h.cfg.Brokers {
		parts, err := h.dialer.LookupPartitions(ctx, "tcp", b, h.cfg.Topic)
		if ctx.Err() != nil {
			return fmt.Errorf("kafka: brokers unreachable: %s: no answer within %s", b, kafkaProbeTimeout)
		}
		var opErr *net.OpError
		var dnsErr *net.DNSError
		switch {
		case err == nil && len(parts) > 0:
			return nil
		case err == nil, errors.Is(err, kafka.UnknownTopicOrPartition):
			return fmt.Errorf("kafka: topic %q not found", h.cfg.Topic)
		case errors.Is(err, kafka.TopicAuthorizationFailed):
			return fmt.Errorf("kafka: not authorized to read topic %q: %w", h.cfg.Topic, err)
		case errors.Is(err, kafka.SASLAuthenticationFailed),
			errors.Is(err, kafka.UnsupportedSASLMechanism),
			errors.Is(err, kafka.IllegalSASLState):
			return fmt.Errorf("kafka: SASL authentication failed at %s: %w", b, h.saslDetail(err))
		case errors.As(err, &opErr) && opErr.Op == "dial":
			unreachable = append(unreachable, opErr.Error())
			first = cmp.Or(first, err)
		case errors.As(err, &dnsErr):
			unreachable = append(unreachable, dnsErr.Error())
			first = cmp.Or(first, err)
		default:
			return fmt.Errorf("kafka: metadata of topic %q from %s: %w", h.cfg.Topic, b, err)
		}
	}
	return &unreachableError{what: strings.Join(unreachable, "; "), err: first}
}

// saslDetail returns the Kafka error code inside err, which kafka-go wraps in
// a sentence repeating the broker's address.
func (h *kafkaHealth) saslDetail(err error) error {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		if s := h.cfg.SASL; s != nil {
			return fmt.Errorf("user %q, mechanism %s: %w", s.Username, s.Mechanism, kerr)
		}
		return kerr
	}
	return err
}

// unreachableError reports that no broker could be reached.
type unreachableError struct {
	what string
	err  error // the first broker's error
}

func (e *unreachableError) Error() string { return "kafka: brokers unreachable: " + e.what }

func (e *unreachableError) Unwrap() error { return e.err }
