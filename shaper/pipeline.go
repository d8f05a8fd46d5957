package shaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// settleTimeout bounds one Ack or Nack call, which must happen even while the
// process is being forced down.
const settleTimeout = 5 * time.Second

// Parts are the concrete pieces a Pipeline connects. The pipeline owns them
// once New returns: Run closes them before it returns.
type Parts struct {
	Source Source
	Sink   Sink
	// DeadLetter receives undeliverable messages; nil means none is
	// configured, and such messages are nacked for redelivery and logged.
	DeadLetter Sink
	Limiter    Limiter
	// KeyLimiter makes one key's own limiter, starting at now, under
	// rate.per_key; nil when there is none.
	KeyLimiter func(key string, now time.Time) Limiter
	// DestinationLimiter makes one destination's own limiter, starting at
	// now at its ceiling (rate.per_key.limit, else rate.limit), for
	// rate.adaptive to move (with rate.shared, one shared through Redis);
	// nil moves the pipeline's Limiter instead (as with rate.shared and one
	// destination, whose limit is the pipeline's shared one).
	DestinationLimiter func(name string, now time.Time) Limiter
	// Clock is the time the pipeline runs on; nil is a SystemClock (Go
	// timers). Package fleet gives every pipeline of the process the one
	// clock of package tuning.
	Clock   Clock
	Metrics *Metrics
	Logger  *slog.Logger
	// DrainTimeout bounds the graceful drain that Drain starts.
	DrainTimeout time.Duration
}

// Pipeline moves messages from one source through a bounded bucket to one
// sink, at the rate its limiter gives, and settles each message with its
// source once its outcome is final.
//
// The life of a message, in the order of this file: the fetcher admits it
// into the bucket when there is room (fetch); the scheduler takes it when a
// rate slot and an in-flight slot are free, or expires it if its slot comes
// later than max_queue_time allows (schedule); an attempt sends it under the
// per-attempt timeout (begin, then send on a worker or start on the
// scheduler, then finish); the retry policy sends a failure back to the
// bucket's retry heap or to the dead-letter target (fail); the source is told
// the final outcome (settle).
type Pipeline struct {
	cfg          PipelineConfig // as built; what Reconfigure may change is in settings and rate
	src          Source
	sink         Sink
	deadLetter   Sink
	lim          Limiter
	clock        Clock
	bucket       *bucket
	keyOf        func(*Message) string // nil: no keys, one lane
	metrics      *Metrics
	m            *pipelineMetrics
	log          *slog.Logger
	summary      *summaryLog // the per-message events: dead letters, expiries, failed acks
	drainTimeout time.Duration

	// settings are the bucket and delivery settings in force; Reconfigure
	// swaps them, and each use takes one snapshot.
	settings atomic.Pointer[settings]
	// inFlight holds one token per attempt in flight, and one for the task
	// the scheduler is about to send; its size is max_in_flight. The
	// scheduler takes a token and either gives it back at once (nothing
	// departs) or hands it to the attempt, whose send gives it back once
	// the sink has answered.
	inFlight *semaphore
	// attempting counts attempts in flight, for Status.
	attempting atomic.Int64
	// recent counts what was sent and what expired lately, for the state.
	recent recent
	// alarm is what the scheduler waits on for each departure; a rate
	// change, a pause's end or a destination's hold that changed rings it
	// to ask again.
	alarm Alarm
	// paused is the operator's hold on every departure (each destination's
	// own holds are in its gate); adaptive (nil: off, or each
	// destination's own) moves the pipeline's limit in force.
	paused   pause
	adaptive *adaptive
	// destLimiter makes a destination's own limiter (nil: none); with it,
	// rate.adaptive moves each destination's limit on its own.
	destLimiter func(name string, now time.Time) Limiter
	// drain is closed by Drain; draining mirrors it for cheap checks.
	drain     chan struct{}
	drainOnce sync.Once
	draining  atomic.Bool
	// exhausted is set once a bounded source has handed out everything
	// (Fetch returned io.EOF): Run returns when the bucket is empty.
	exhausted atomic.Bool

	mu    sync.Mutex // guards rate
	rate  RateConfig
	count [4]atomic.Int64 // outcome counts, in outcomes order
}

// New returns a pipeline for a validated, defaulted config.
func New(cfg PipelineConfig, parts Parts) *Pipeline {
	log := parts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := cfg.Delivery
	clock := parts.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	p := &Pipeline{
		cfg:          cfg,
		src:          parts.Source,
		sink:         parts.Sink,
		deadLetter:   parts.DeadLetter,
		lim:          parts.Limiter,
		clock:        clock,
		keyOf:        keyFunc(cfg.Key, destinationOf(parts.Sink)),
		metrics:      parts.Metrics,
		m:            parts.Metrics.forPipeline(cfg.Name),
		log:          log.With("pipeline", cfg.Name),
		drainTimeout: parts.DrainTimeout,
		inFlight:     newSemaphore(d.MaxInFlight),
		drain:        make(chan struct{}),
		alarm:        clock.NewAlarm(),
		rate:         cfg.Rate,
	}
	lanes := lanesOf(cfg, parts.KeyLimiter)
	if cfg.Rate.Adaptive != nil {
		p.destLimiter = parts.DestinationLimiter
	}
	lanes.newDest, lanes.dest = p.newDestination, destinationOfTask(parts.Sink)
	if k := cfg.Key; k != nil && (k.From == "host" || cfg.Pushback.Scope == ScopeKey) {
		// The key names the destination, or under pushback.scope: key
		// stands for it: each lane its own pause, breaker and limit.
		lanes.dest = func(_ *Message, key string) string { return key }
	}
	p.bucket = newBucket(effectiveCapacity(cfg.Bucket, cfg.Rate.Limit), lanes)
	p.paused = pause{changed: p.alarm.Ring}
	p.summary = newSummaryLog(p.log, clock)
	if a := cfg.Rate.Adaptive; a != nil && p.destLimiter == nil {
		p.adaptive = newAdaptive(*a, cfg.Rate.Limit)
	}
	p.settings.Store(&settings{bucket: cfg.Bucket, delivery: d, policy: NewRetryPolicy(d.Retry)})
	p.m.capacity.Set(float64(p.bucket.Capacity()))
	parts.Metrics.live.add(p)
	return p
}

// lanesOf shapes the bucket's lanes for cfg: without key: there is one
// lane, bound by nothing but the capacity. limiter makes a key's own
// limiter (rate.per_key).
func lanesOf(cfg PipelineConfig, limiter func(string, time.Time) Limiter) laneOptions {
	k := cfg.Key
	if k == nil {
		return laneOptions{}
	}
	o := laneOptions{perKey: cfg.Bucket.PerKeyCapacity, maxKeys: k.MaxKeys, ordered: k.Ordered, inFlight: k.MaxInFlight}
	if pk := cfg.Rate.PerKey; pk != nil && limiter != nil {
		o.limiter = limiter
		o.idle = time.Duration(float64(*pk.Burst) / pk.Limit * float64(time.Second))
	}
	return o
}

// handBack returns to their source the messages of a key whose lane is
// full (a source that cannot pause: JetStream), with a delay that grows
// with how many of the key are ahead: about the time they take to leave,
// between minHandBack and maxHandBack. This is no attempt, and other keys
// get in meanwhile.
func (p *Pipeline) handBack(ctx context.Context, full []handBack) {
	now := p.clock.Now()
	rate := p.lim.Limit(now)
	if pk := p.cfg.Rate.PerKey; pk != nil {
		rate = min(rate, pk.Limit)
	}
	for _, h := range full {
		delay := time.Duration(float64(h.backlog) / rate * float64(time.Second))
		delay = min(max(delay, minHandBack), maxHandBack)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		if err := h.msg.Receipt.Nack(sctx, delay); err != nil {
			p.summary.event(slog.LevelError, "nack failed; the source redelivers after its own timeout", string(NackLaneFull), h.msg.ID, err)
		}
		cancel()
		p.m.nacked.WithLabelValues(string(NackLaneFull)).Inc()
	}
}

// minHandBack and maxHandBack bound how long a message handed back by a
// full lane stays with its source.
const (
	minHandBack = time.Second
	maxHandBack = time.Minute
)

// effectiveCapacity holds the bucket to limit × max_queue_time, so that
// admission alone keeps the wait of a full bucket within max_queue_time.
// The product stays a float until it is known to be below the capacity:
// converted first, a huge one would overflow int.
func effectiveCapacity(b BucketConfig, limit float64) int {
	byWait := limit * b.MaxQueueTime.Seconds()
	if !(byWait < float64(b.Capacity)) {
		return max(b.Capacity, 1)
	}
	return max(int(byWait), 1)
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.cfg.Name }

// Drain starts a graceful stop: the source is no longer fetched, the bucket
// keeps draining at the configured rate until it is empty or the drain
// timeout passes, then what remains is nacked and Run returns. Drain does not
// wait; it may be called more than once.
func (p *Pipeline) Drain() {
	p.drainOnce.Do(func() {
		p.draining.Store(true)
		close(p.drain)
		signal(p.bucket.ready)
	})
}

// Ready returns nil when the pipeline's source is connected, the pipeline
// is not draining, and it is not stalled (expiring messages without sending
// any), and otherwise why not.
func (p *Pipeline) Ready() error {
	if p.draining.Load() {
		return errors.New("draining")
	}
	if err := p.stalled(p.clock.Now()); err != nil {
		return err
	}
	return p.src.Ready()
}

// stalled returns why the pipeline cannot send, or nil: over the last
// recentWindow seconds more messages expired than requests were sent. A
// sink that holds every in-flight slot for longer than max_queue_time, or
// a rate far below what comes in, look like this.
func (p *Pipeline) stalled(now time.Time) error {
	sent, expired := p.recent.counts(now)
	if expired <= sent {
		return nil
	}
	return fmt.Errorf("stalled: %d messages expired in the last %ds and %d requests were sent (limit in force %g/s, max_queue_time %s)",
		expired, recentWindow, sent, p.lim.Limit(now), p.settings.Load().bucket.MaxQueueTime)
}

// Run moves messages until Drain is called and the drain completes, until a
// bounded source is exhausted and everything it gave is settled, or until
// ctx ends. Ending ctx forces a stop: attempts in flight are cancelled, and
// every message without a final outcome is nacked, never acked. Run returns
// only after every message it took has been settled and its goroutines have
// exited, and closes the parts.
//
// There are two ways to stop, then: ctx (force) and Drain (graceful). Inside,
// fetchCtx ends the fetcher (at the drain, or with ctx) and schedCtx the
// scheduler (when the drain timeout passes, or with ctx); attempts in flight
// run under ctx, so a drain lets them finish.
func (p *Pipeline) Run(ctx context.Context) error {
	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	schedCtx, stopSched := context.WithCancel(ctx)
	defer stopSched()

	p.log.Info("pipeline running", "mode", p.cfg.Rate.Mode, "limit", p.cfg.Rate.Limit, "burst", *p.cfg.Rate.Burst,
		"capacity", p.bucket.Capacity(), "max_queue_time", p.cfg.Bucket.MaxQueueTime,
		"max_in_flight", p.cfg.Delivery.MaxInFlight, "dead_letter", p.deadLetter != nil)
	// The summary log's last counts go out once every message is settled.
	defer p.summary.flush()
	var wg sync.WaitGroup // the fetcher, the drain timer, expiry, the adaptive rate, the fleet's limit, attempts and settlements
	wg.Go(func() { p.fetch(fetchCtx) })
	wg.Go(func() { p.expireOnTime(ctx, schedCtx, &wg) })
	if p.cfg.Rate.Adaptive != nil {
		wg.Go(func() { p.adapt(schedCtx) })
	}
	if fr, shared := p.lim.(FallbackReporter); shared {
		wg.Go(func() { p.followFleet(schedCtx, fr) })
	}
	wg.Go(func() {
		select {
		case <-p.drain:
		case <-schedCtx.Done():
			return
		}
		stopFetch()
		timer := p.clock.NewTimer(p.drainTimeout)
		defer timer.Stop()
		select {
		case <-timer.C():
			p.log.Warn("drain timeout passed; nacking what remains", "timeout", p.drainTimeout, "held", p.bucket.Held())
			stopSched()
		case <-schedCtx.Done():
		}
	})

	p.schedule(ctx, schedCtx, &wg)
	stopSched()
	stopFetch()
	wg.Wait() // attempts in flight finish; failures go back to the bucket

	left := p.bucket.drain()
	now := p.clock.Now()
	for _, t := range left {
		p.nack(ctx, t, NackShutdown, t.due.Sub(now))
	}
	if len(left) > 0 {
		p.log.Info("nacked unfinished messages for redelivery", "count", len(left))
	}
	p.metrics.live.remove(p)
	return p.close(ctx)
}

func (p *Pipeline) close(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	return Parts{Source: p.src, Sink: p.sink, DeadLetter: p.deadLetter, Limiter: p.lim}.Close(cctx)
}

// Close releases every part that is set, within ctx: the source, the
// sink, the dead-letter target, and a limiter that holds a resource (a
// shared limiter and its Redis client). A pipeline's Run closes its own
// parts; Close is for parts built but never run.
func (ps Parts) Close(ctx context.Context) error {
	var errs []error
	if ps.Source != nil {
		errs = append(errs, ps.Source.Close(ctx))
	}
	if ps.Sink != nil {
		errs = append(errs, ps.Sink.Close(ctx))
	}
	if ps.DeadLetter != nil {
		errs = append(errs, ps.DeadLetter.Close(ctx))
	}
	if c, ok := ps.Limiter.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// expiryGrain is how much later than its deadline expireOnTime may find a
// message: it looks at most once per grain, so that a bucket whose
// messages leave in time costs at most that many wake-ups a second,
// whatever the rate.
const expiryGrain = 50 * time.Millisecond

// expireOnTime applies on_expire to every queued message within
// expiryGrain of its deadline, whether or not its lane gets a turn (a
// destination that pushes back, a lane behind many others), until
// schedCtx ends. With on_expire: deliver nothing expires. It sleeps while
// nothing is queued.
func (p *Pipeline) expireOnTime(ctx, schedCtx context.Context, wg *sync.WaitGroup) {
	for {
		bucket := p.settings.Load().bucket
		now := p.clock.Now()
		var next time.Time
		if bucket.OnExpire != OnExpireDeliver {
			var due []*task
			due, next = p.bucket.expired(now, bucket.MaxQueueTime)
			for _, t := range due {
				wg.Go(func() { p.expire(ctx, t) })
			}
		}
		var wake <-chan time.Time
		var timer Timer
		if !next.IsZero() {
			timer = p.clock.NewTimer(max(next.Sub(now), expiryGrain))
			wake = timer.C()
		}
		select {
		case <-wake:
		case <-p.bucket.queuedMore:
		case <-schedCtx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if schedCtx.Err() != nil {
			return
		}
	}
}

// fetchAhead is how much of the rate a fetch brings in when the bucket is
// full: the fetcher waits for room for limit × fetchAhead messages (at most
// a quarter of the capacity) before it fetches again. A full bucket then
// costs the broker one fetch per batch, not one per message settled (a
// JetStream pull request and its reply per message), and the bucket still
// holds three quarters of its capacity ahead of the scheduler.
const fetchAhead = 50 * time.Millisecond

// minFetchBatch is the least room the fetcher waits for, capacity allowing:
// at 100/s, limit × fetchAhead is 5 messages, and a JetStream pull per 5
// messages costs nats-server more per message than a pull per 50
// (measured at 100/s: 213–226 against 180–193 µs per message, and shaper
// 386–479 against 333–400). From 1000/s up limit × fetchAhead is larger.
const minFetchBatch = 50

// fetchBatch is the room the fetcher waits for at limit with a bucket of
// capacity: limit × fetchAhead, at least minFetchBatch, at most a quarter
// of the capacity, at least 1.
func fetchBatch(limit float64, capacity int) int {
	n := int(limit * fetchAhead.Seconds())
	return max(min(max(n, minFetchBatch), capacity/4), 1)
}

// fetch admits messages from the source while the bucket has room, until ctx
// ends. Errors are logged on change and retried with backoff.
func (p *Pipeline) fetch(ctx context.Context) {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	var lastErr string
	dropped := uint64(0)
	for {
		room := p.bucket.WaitRoom(ctx, fetchBatch(p.lim.Limit(p.clock.Now()), p.bucket.Capacity()))
		if room == 0 {
			return
		}
		msgs, err := p.src.Fetch(ctx, room)
		full := p.bucket.admit(p.clock.Now(), msgs, p.keyOf) // even alongside an error: a fetched message is never lost
		p.handBack(ctx, full)
		p.m.received.Add(float64(len(msgs)))
		p.m.depth.Set(float64(p.bucket.Held()))
		if dc, ok := p.src.(DropCounter); ok {
			n := dc.Dropped()
			p.m.dropped.Add(float64(n - dropped))
			dropped = n
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, io.EOF):
			p.log.Info("source exhausted; finishing what the bucket holds", "held", p.bucket.Held())
			p.exhausted.Store(true)
			signal(p.bucket.ready) // the scheduler checks whether it is done
			return
		case err != nil:
			if err.Error() != lastErr {
				p.log.Error("source fetch failed; retrying with backoff", "err", err)
				lastErr = err.Error()
			}
			if !sleep(ctx, p.clock, backoff) {
				return
			}
			backoff = min(backoff*2, maxBackoff)
		default:
			if lastErr != "" {
				p.log.Info("source fetch recovered")
				lastErr = ""
			}
			backoff = minBackoff
		}
	}
}

// schedule is the scheduler: it gives each task an in-flight slot, then a
// rate slot, and starts its attempt at the rate slot's time. It returns
// when the drain is complete or schedCtx ends.
//
// A rate slot is spent only by a request that is sent. The scheduler asks
// the limiter when the next slot comes (Next) and waits for it without
// taking it; it takes the slot (Allow) only when it sends. So a task
// whose slot would come past its deadline expires without spending one (the
// next task is looked at instead), and a rate change while the scheduler
// waits wakes it to ask again under the new rate.
//
// An attempt starts on the scheduler (begin) and runs on a worker: a task
// goes to an idle one, or to a new one when none is idle, so there are as
// many as were ever busy at once (at most max_in_flight sending, and those
// still settling what the sink answered). A worker keeps its goroutine, and the
// stack the HTTP client grew, from one attempt to the next; the workers end
// when the scheduler returns.
func (p *Pipeline) schedule(ctx, schedCtx context.Context, wg *sync.WaitGroup) {
	work := make(chan attempt)
	defer close(work)
	defer p.alarm.Close()
	defer context.AfterFunc(schedCtx, p.alarm.Ring)()
	for {
		if !p.inFlight.acquire(schedCtx) {
			return
		}
		t, more := p.departure(ctx, schedCtx, wg)
		if t == nil {
			p.inFlight.release() // nothing departs: the token goes back here, and only here
			if !more {
				return
			}
			continue
		}
		p.m.queueWait.Observe(p.clock.Now().Sub(t.queued).Seconds())
		if revoked(t) { // taken back by the source since take looked: nacked, never sent
			p.inFlight.release()
			wg.Go(func() { p.nack(ctx, t, NackRevoked, 0) })
			continue
		}
		a := p.begin(t) // the attempt owns the token now
		select {
		case work <- a:
		default:
			wg.Go(func() { p.work(ctx, a, work) })
		}
	}
}

// work is a worker: it makes attempt a, then each attempt it receives
// from work, until work is closed.
func (p *Pipeline) work(ctx context.Context, a attempt, work <-chan attempt) {
	for ok := true; ok; a, ok = <-work {
		p.send(ctx, a)
	}
}

// departure waits for the next task and its rate slot, and returns the task
// to send now. It returns nil when nothing departs: with more true when
// every ready task expired or went back to its lane (look again), false
// when the scheduler is done
// (the drain is complete, or schedCtx ended; a task it held goes back into
// the bucket, to be nacked with the rest).
func (p *Pipeline) departure(ctx, schedCtx context.Context, wg *sync.WaitGroup) (t *task, more bool) {
	if t = p.next(ctx, schedCtx); t == nil {
		return nil, false
	}
	t, ok := p.depart(ctx, schedCtx, t, wg)
	switch {
	case !ok:
		p.bucket.putBack(t)
		return nil, false
	case t == nil: // every ready task expired
		return nil, true
	}
	return t, false
}

// depart waits for the rate slot of t and takes it, with t's key's own
// slot (rate.per_key) first, and returns the task to send in it: t, or when
// t expired before its slot, the next ready task that did not; nil when
// every ready task expired, or when another replica took t's key's shared
// slot (t is back in its lane). It reports false, with the task it held,
// when schedCtx ended first.
//
// While the operator has paused the pipeline it waits for the resumption,
// and expires t at its deadline (plan decides which).
func (p *Pipeline) depart(ctx, schedCtx context.Context, t *task, wg *sync.WaitGroup) (*task, bool) {
	demand, _ := p.lim.(Demander)
	for {
		bucket := p.settings.Load().bucket
		if demand != nil {
			demand.Demand(p.bucket.Queued() + 1) // t and those behind it
		}
		now := p.clock.Now()
		paused := p.paused.on()
		at, expire := plan(now, t.queued.Add(bucket.MaxQueueTime), bucket.OnExpire != OnExpireDeliver, paused, p.lim.Next)
		if expire {
			expired := t
			wg.Go(func() { p.expire(ctx, expired) })
			if t, _ = p.take(ctx, now); t == nil {
				return nil, true
			}
			continue
		}
		switch sleepUntil(schedCtx, p.alarm, at) {
		case woken:
			continue // the rate or a hold changed: ask again
		case cancelled:
			return t, false
		}
		if paused {
			continue
		}
		// The slot has come: take it, unless the schedule moved since
		// Next (a rate change in the last stretch of the sleep, a shared
		// limiter's lease gone stale) or a hold began; then ask again,
		// having taken nothing.
		now = p.clock.Now()
		if p.paused.on() {
			continue
		}
		if _, why := t.dest.gate.shut(now); why != holdNone {
			p.bucket.putBack(t) // its destination pushed back meanwhile: the lane waits
			return nil, true
		}
		if !t.keySlot {
			if !p.bucket.spend(t, now) {
				// Another replica took the key's shared slot: t goes
				// back to its lane, which waits for the key's next.
				p.bucket.putBack(t)
				return nil, true
			}
			t.keySlot = true
		}
		if d := t.dest; d.lim != nil && !t.destSlot {
			if !d.lim.Allow(now) {
				// Another lane of its destination took the slot: t
				// goes back to its lane, ready at the destination's next.
				p.bucket.putBack(t)
				return nil, true
			}
			t.destSlot = true
		}
		if p.lim.Allow(now) {
			t.keySlot, t.destSlot = false, false
			return t, true
		}
	}
}

// plan decides, at now, what depart does with the task it holds, whose
// deadline is deadline (expires: false under on_expire: deliver): wait
// until at, or expire the task now. Running, it waits for the rate's slot,
// slot(now), and expires the task when that comes after its deadline.
// Paused, it waits for the deadline (a minute when nothing expires: a
// resumption wakes it first) and expires the task once the deadline has
// passed: a pause, whose end is not known, never expires a message early.
func plan(now, deadline time.Time, expires, paused bool, slot func(time.Time) time.Time) (at time.Time, expire bool) {
	switch {
	case !paused:
		at = slot(now)
		return at, expires && at.After(deadline)
	case !expires:
		return now.Add(time.Minute), false
	}
	return deadline, !now.Before(deadline)
}

// take is bucket.take without the tasks the source has taken back (a Kafka
// partition revoked by a rebalance): those are nacked, never sent, and the
// partition's new owner delivers them.
func (p *Pipeline) take(ctx context.Context, now time.Time) (*task, time.Time) {
	for {
		t, due := p.bucket.take(now)
		if t == nil || !revoked(t) {
			return t, due
		}
		p.nack(ctx, t, NackRevoked, 0)
	}
}

// next waits for the next task to send, and returns nil when schedCtx ends
// or, while draining or once the source is exhausted, when the bucket
// holds nothing more.
func (p *Pipeline) next(ctx, schedCtx context.Context) *task {
	for {
		now := p.clock.Now()
		t, due := p.take(ctx, now)
		if t != nil {
			return t
		}
		if p.finishing() && p.bucket.Held() == 0 {
			return nil
		}
		var wake <-chan time.Time
		var timer Timer
		if !due.IsZero() {
			timer = p.clock.NewTimer(due.Sub(now))
			wake = timer.C()
		}
		select {
		case <-p.bucket.ready:
		case <-wake:
		case <-schedCtx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if schedCtx.Err() != nil {
			return nil
		}
	}
}

// revoked reports whether the source has taken t's message back.
func revoked(t *task) bool {
	r, ok := t.msg.Receipt.(Revocable)
	return ok && r.Revoked()
}

// attempt is one attempt of a task in flight: when it started, under
// which settings. It owns the task's in-flight token, which finish gives
// back.
type attempt struct {
	t     *task
	start time.Time
	set   *settings
	// probe is whether the attempt is its destination's breaker probe.
	probe bool
}

// begin starts an attempt of t now, under the settings in force; its
// destination's gate learns that a request goes (a probe, when the
// breaker waited for one). Nothing that begins is left unanswered: the
// gate of a probe that never went would wait for its answer for good.
func (p *Pipeline) begin(t *task) attempt {
	p.m.inFlight.Inc()
	p.attempting.Add(1)
	start := p.clock.Now()
	p.recent.addSent(start)
	return attempt{t: t, start: start, set: p.settings.Load(), probe: t.dest.gate.departing(start)}
}

// send makes the request of a on the calling goroutine, under the
// per-attempt timeout, and finishes the attempt with the answer.
func (p *Pipeline) send(ctx context.Context, a attempt) {
	actx, cancel := context.WithTimeout(ctx, a.set.delivery.Timeout)
	err := p.sink.Send(actx, a.t.msg)
	cancel()
	p.finish(ctx, a, err)
}

// finish ends attempt a with the sink's answer err: it gives the in-flight
// token back as soon as the sink has answered (settling does not hold it),
// then settles the task, sends it back to the retry heap, or dead-letters
// it.
func (p *Pipeline) finish(ctx context.Context, a attempt, err error) {
	t, set := a.t, a.set
	end := p.clock.Now()
	p.bucket.answered(t)
	if code := RequestCode(err); code != "" {
		p.m.requests.WithLabelValues(code).Inc()
		p.m.requestDuration.Observe(end.Sub(a.start).Seconds())
	}
	p.m.inFlight.Dec()
	p.attempting.Add(-1)
	p.inFlight.release()

	if t.first.IsZero() {
		t.first = a.start
	}
	t.attempts++
	if p.pushedBack(t, a.probe, a.start, end, err, set) {
		t.attempts-- // a throttled attempt, or one in flight when the breaker opened, spends none
	}
	if err == nil {
		p.ack(ctx, t, OutcomeDelivered)
		return
	}
	t.err = err
	d := set.policy.Decide(err, t.attempts, t.first, end)
	if d.Retry {
		p.m.retries.Inc()
		p.log.Debug("attempt failed; retrying", "id", t.msg.ID, "attempt", t.attempts, "err", err, "at", d.At)
		p.bucket.retry(t, d.At)
		return
	}
	p.fail(ctx, t, d.Reason, OutcomeDeadLettered)
}

// expire applies on_expire to a task whose departure would come too late.
func (p *Pipeline) expire(ctx context.Context, t *task) {
	bucket := p.settings.Load().bucket
	p.recent.addExpired(p.clock.Now())
	if t.err == nil {
		t.err = fmt.Errorf("would wait longer than max_queue_time %s", bucket.MaxQueueTime)
	}
	if bucket.OnExpire == OnExpireDrop {
		p.summary.event(slog.LevelWarn, "message expired; dropped by on_expire: drop", string(ReasonExpired), t.msg.ID, t.err, "source", t.msg.Origin)
		p.ack(ctx, t, OutcomeDropped)
		return
	}
	p.fail(ctx, t, ReasonExpired, OutcomeExpired)
}

// fail dead-letters a task for reason, then acks it with outcome. Without a
// dead-letter target, or when the target fails, the task is nacked instead:
// it comes back later and is never silently lost.
func (p *Pipeline) fail(ctx context.Context, t *task, reason Reason, outcome Outcome) {
	event := func(level slog.Level, msg string, err error, args ...any) {
		args = append(args, "source", t.msg.Origin, "attempts", t.attempts)
		p.summary.event(level, msg, string(reason), t.msg.ID, err, args...)
	}
	delivery := p.settings.Load().delivery
	delay := delivery.Retry.MaxBackoff
	if p.deadLetter == nil {
		event(slog.LevelWarn, "undeliverable message nacked for redelivery: no dead_letter target is configured", t.err)
		p.nack(ctx, t, NackNoDeadLetter, delay)
		return
	}
	dl := p.deadLetterMessage(t, reason)
	err := p.sendDeadLetter(ctx, dl, delivery.Timeout)
	if errors.Is(err, ErrMalformed) {
		// The dead letter itself is too large for its target, and would
		// be forever. Send it without the payload and the message's own
		// headers instead; the original stays in the source's log, where
		// Shaper-Source points.
		event(slog.LevelWarn, "dead letter too large for its target; sent without its payload", err, "message_err", t.err)
		err = p.sendDeadLetter(ctx, withoutPayload(dl), delivery.Timeout)
	}
	if err != nil {
		event(slog.LevelError, "dead-letter publish failed; message nacked for redelivery", err, "message_err", t.err)
		p.nack(ctx, t, NackDeadLetterFailed, delay)
		return
	}
	event(slog.LevelWarn, "message dead-lettered", t.err)
	p.ack(ctx, t, outcome)
}

func (p *Pipeline) sendDeadLetter(ctx context.Context, dl *Message, timeout time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.deadLetter.Send(dctx, dl)
}

// withoutPayload is a dead letter stripped to its Shaper-* headers, with
// Shaper-Payload-Omitted giving the size of what was left out.
func withoutPayload(dl *Message) *Message {
	h := map[string][]string{"Shaper-Payload-Omitted": {strconv.Itoa(len(dl.Payload)) + " bytes"}}
	for _, k := range []string{"Shaper-Reason", "Shaper-Error", "Shaper-Attempts", "Shaper-Pipeline", "Shaper-Source", "Shaper-Id"} {
		h[k] = dl.Header[k]
	}
	return &Message{ID: dl.ID, Origin: dl.Origin, Key: dl.Key, Header: h, Payload: []byte{}}
}

// deadLetterMessage is the original message with the Shaper-* headers.
// Shaper-Attempts counts on from the attempts made before the message came
// to the source (a dead letter replayed), and Shaper-Id keeps the id it
// was sent with, so a replay of it sends the same Idempotency-Key.
func (p *Pipeline) deadLetterMessage(t *task, reason Reason) *Message {
	h := make(map[string][]string, len(t.msg.Header)+6)
	for k, v := range t.msg.Header {
		h[k] = v
	}
	h["Shaper-Reason"] = []string{string(reason)}
	h["Shaper-Error"] = []string{oneLine(t.err.Error(), 1024)}
	h["Shaper-Attempts"] = []string{strconv.Itoa(t.msg.Attempts + t.attempts)}
	h["Shaper-Pipeline"] = []string{p.cfg.Name}
	h["Shaper-Source"] = []string{t.msg.Origin}
	h["Shaper-Id"] = []string{t.msg.ID}
	return &Message{ID: t.msg.ID, Origin: t.msg.Origin, Key: t.msg.Key, Header: h, Payload: t.msg.Payload}
}

// oneLine makes s safe for a header value: printable, one line, at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}

// ack settles a task whose outcome is final.
func (p *Pipeline) ack(ctx context.Context, t *task, outcome Outcome) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := t.msg.Receipt.Ack(sctx); err != nil {
		// The outcome happened; the source will redeliver, and the
		// Idempotency-Key lets the sink drop the duplicate.
		p.summary.event(slog.LevelError, "ack failed; the message may be redelivered", string(outcome), t.msg.ID, err)
	}
	p.m.completed[outcome].Inc()
	for i, o := range outcomes {
		if o == outcome {
			p.count[i].Add(1)
		}
	}
	p.released(t)
}

// nack hands a task back to its source for redelivery after delay.
func (p *Pipeline) nack(ctx context.Context, t *task, reason NackReason, delay time.Duration) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := t.msg.Receipt.Nack(sctx, max(delay, 0)); err != nil {
		p.summary.event(slog.LevelError, "nack failed; the source redelivers after its own timeout", string(reason), t.msg.ID, err)
	}
	p.m.nacked.WithLabelValues(string(reason)).Inc()
	p.released(t)
}

func (p *Pipeline) released(t *task) {
	p.bucket.release(t)
	p.m.depth.Set(float64(p.bucket.Held()))
	if p.finishing() {
		signal(p.bucket.ready) // the scheduler checks whether it is done
	}
}

// finishing reports whether no more messages will be admitted: the
// pipeline drains, or its source is exhausted.
func (p *Pipeline) finishing() bool { return p.draining.Load() || p.exhausted.Load() }

// settings are a pipeline's bucket and delivery settings, replaced whole by
// Reconfigure.
type settings struct {
	bucket   BucketConfig
	delivery DeliveryConfig
	policy   *RetryPolicy
}

// ErrNeedsRestart is returned by Reconfigure for a change it cannot make in
// place; the caller replaces the pipeline instead (drain the old, start a
// new one).
var ErrNeedsRestart = errors.New("change needs a new pipeline")

// Reconfigure applies a new config to a running pipeline in place: the rate
// (limit and burst), the bucket (capacity, max_queue_time, on_expire) and
// the delivery settings (timeout, max_in_flight, retry). Messages held keep
// going; the next departure uses the new settings. It returns
// ErrNeedsRestart, changing nothing, when cfg differs in what the pipeline
// was built with: its name, rate mode or adaptive rate. The parts themselves
// (source, sink target, dead letter) are the caller's to compare and
// reconfigure.
func (p *Pipeline) Reconfigure(cfg PipelineConfig) error {
	if cfg.Name != p.cfg.Name || cfg.Rate.Mode != p.cfg.Rate.Mode || !reflect.DeepEqual(cfg.Rate.Adaptive, p.cfg.Rate.Adaptive) ||
		!reflect.DeepEqual(cfg.Key, p.cfg.Key) || !reflect.DeepEqual(cfg.Rate.PerKey, p.cfg.Rate.PerKey) ||
		cfg.Bucket.PerKeyCapacity != p.cfg.Bucket.PerKeyCapacity || cfg.Pushback != p.cfg.Pushback {
		return fmt.Errorf("%w: name, rate.mode, rate.adaptive, key, rate.per_key, bucket.per_key_capacity or pushback changed", ErrNeedsRestart)
	}
	if err := checkRate(cfg.Rate.Mode, cfg.Rate.Limit, *cfg.Rate.Burst, cfg.Bucket.MaxQueueTime); err != nil {
		return err
	}
	d := cfg.Delivery
	p.settings.Store(&settings{bucket: cfg.Bucket, delivery: d, policy: NewRetryPolicy(d.Retry)})
	p.inFlight.resize(d.MaxInFlight)
	p.mu.Lock()
	p.setRateLocked(cfg.Rate.Limit, *cfg.Rate.Burst) // the capacity follows the new bucket settings
	p.mu.Unlock()
	p.log.Info("pipeline reconfigured", "limit", cfg.Rate.Limit, "capacity", p.bucket.Capacity(),
		"max_queue_time", cfg.Bucket.MaxQueueTime, "max_in_flight", d.MaxInFlight, "timeout", d.Timeout)
	return nil
}
