package health

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/replay"
)

// Options configure the degrader.
type Options struct {
	Consumer string // durable and inbox name; default "degrader"
	Params   Params // zero: DefaultParams
	// Poll is how often each copy looks for settled events to fold when
	// nothing woke it; default 250ms.
	Poll time.Duration
	// TimerEvery is how often each copy looks for deadlines that fell due;
	// default 1s.
	TimerEvery time.Duration
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "degrader"
	}
	if o.Params == (Params{}) {
		o.Params = DefaultParams()
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.TimerEvery <= 0 {
		o.TimerEvery = time.Second
	}
	return o
}

// Degrader stores the events it consumes and folds them, in stream order,
// into each tool's health.
//
// Why two steps: a tool's detector depends on the order of its outcomes,
// and the share cap ties a tenant's tools together, so a decision must see
// exactly the events before it in the stream. Copies and redeliveries store
// events in any order; the fold runs only up to the consumer's ack floor —
// the sequence below which JetStream holds every event of the consumer
// settled — so it reads a complete, ordered prefix of the stream, the same
// one a replay reads. A transition is therefore final when published.
type Degrader struct {
	pool *pgxpool.Pool
	opts Options
	fold *folder
	log  zerolog.Logger
	// stored is the highest sequence this copy stored; wake signals that
	// it rose. The fold waits for the ack floor to pass it, so an event
	// stored while a fold ran is folded right after, not a Poll later.
	stored atomic.Uint64
	wake   chan struct{}
	// retry holds, per tenant whose fold failed, when to try again and the
	// last pause, so a fold that keeps failing is not retried (and logged)
	// on every poll.
	retry map[string]backoff
}

type backoff struct {
	next  time.Time
	pause time.Duration
}

// New returns a degrader over pool publishing through out.
func New(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger, observe func(string, []Transition)) *Degrader {
	opts = opts.withDefaults()
	return &Degrader{pool: pool, opts: opts, log: log, wake: make(chan struct{}, 1), retry: map[string]backoff{},
		fold: &folder{pool: pool, out: out, consumer: opts.Consumer, p: opts.Params, log: log, observe: observe}}
}

// Handle is the degrader's bus.BatchHandler: it stores the batch's facts
// and their inbox claims in one transaction, then wakes the fold.
func (g *Degrader) Handle(ctx context.Context, batch []*bus.Delivery) []error {
	errs, maxSeq := g.store(ctx, batch)
	if maxSeq > 0 {
		for {
			old := g.stored.Load()
			if old >= maxSeq || g.stored.CompareAndSwap(old, maxSeq) {
				break
			}
		}
		select {
		case g.wake <- struct{}{}:
		default: // a wake-up is pending; it reads stored afresh
		}
	}
	return errs
}

func (g *Degrader) store(ctx context.Context, batch []*bus.Delivery) ([]error, uint64) {
	errs := make([]error, len(batch))
	var keys []database.InboxKey
	byTenant := map[string][]fact{}
	var tenants []string
	var maxSeq uint64
	var valid []int
	for i, d := range batch {
		fs, err := facts(d)
		if err != nil {
			errs[i] = err
			continue
		}
		valid = append(valid, i)
		keys = append(keys, database.InboxKey{Tenant: d.Tenant, EventID: d.Event.ID()})
		if _, ok := byTenant[d.Tenant]; !ok {
			tenants = append(tenants, d.Tenant)
		}
		byTenant[d.Tenant] = append(byTenant[d.Tenant], fs...)
		maxSeq = max(maxSeq, d.StreamSeq)
	}
	if len(valid) == 0 {
		return errs, 0
	}
	fail := func(err error) ([]error, uint64) {
		err = database.Classify(err)
		for _, i := range valid {
			errs[i] = err
		}
		return errs, 0
	}
	u, _, err := database.BeginClaim(ctx, g.pool, g.opts.Consumer, keys)
	if err != nil {
		return fail(err)
	}
	defer u.Close(ctx)
	// Every fact is stored whether its claim is fresh or not: a copy met
	// again at an earlier sequence moves there (see queueFacts).
	b := &pgx.Batch{}
	for _, t := range tenants {
		queueFacts(b, t, byTenant[t])
	}
	if err := u.Commit(ctx, b); err != nil {
		return fail(fmt.Errorf("store health facts: %w", err))
	}
	return errs, maxSeq
}

// loop folds what is settled whenever woken or every Poll, until ctx ends.
func (g *Degrader) loop(ctx context.Context, js jetstream.JetStream) {
	var cons jetstream.Consumer
	tick := time.NewTicker(g.opts.Poll)
	defer tick.Stop()
	var folded uint64 // the floor this copy last folded through
	pause := func() bool { // after an error: never spin
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			return true
		}
	}
	for ctx.Err() == nil {
		var want uint64
		if g.stored.Load() <= folded {
			select {
			case <-ctx.Done():
				return
			case <-g.wake:
			case <-tick.C:
			}
		}
		want = g.stored.Load()
		if cons == nil {
			c, err := js.Consumer(ctx, bus.StreamName, g.opts.Consumer)
			if err != nil {
				pause() // the runner creates it
				continue
			}
			cons = c
		}
		floor, err := g.floor(ctx, cons, want)
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				cons = nil
			}
			pause()
			continue
		}
		g.foldAll(ctx, floor)
		if floor >= want {
			folded = max(folded, floor)
		} else if ctx.Err() == nil {
			// The acks of what this copy stored have not reached the floor
			// within floor's wait (another copy's event before them is
			// still in hand): look again after a pause, not at once.
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			folded = max(folded, floor)
			if g.stored.Load() > folded {
				continue
			}
		}
	}
}

// floor reads the consumer's ack floor: every event of the consumer at or
// below it is settled (applied or dead-lettered). When woken by a batch it
// waits briefly for that batch's acks to land.
func (g *Degrader) floor(ctx context.Context, cons jetstream.Consumer, want uint64) (uint64, error) {
	deadline := time.Now().Add(200 * time.Millisecond)
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err != nil {
			return 0, err
		}
		floor := info.AckFloor.Stream
		if floor >= want || time.Now().After(deadline) || ctx.Err() != nil {
			return floor, nil
		}
		time.Sleep(time.Millisecond) // the batch's acks are on their way
	}
}

func (g *Degrader) foldAll(ctx context.Context, floor uint64) {
	tenants, err := g.fold.pending(ctx, floor)
	if err != nil {
		g.log.Warn().Err(err).Msg("degrader: pending tenants")
		return
	}
	now := time.Now()
	for _, t := range tenants {
		b, failing := g.retry[t]
		if failing && now.Before(b.next) {
			continue
		}
		err := g.fold.fold(ctx, t, floor)
		switch {
		case err == nil:
			delete(g.retry, t)
		case ctx.Err() == nil:
			b.pause = min(max(2*b.pause, 100*time.Millisecond), 30*time.Second)
			b.next = now.Add(b.pause)
			g.retry[t] = b
			g.log.Warn().Err(err).Str("tenant", t).Dur("retry_in", b.pause).Msg("degrader: fold failed; its decisions wait")
		}
	}
}

// timers publishes a degrader.timer event for every deadline that fell
// due. Every copy does; the id derives from the tool, the deadline and the
// state version that set it, so JetStream's duplicate window and the inbox
// keep one.
func (g *Degrader) timers(ctx context.Context, pub interface {
	Publish(ctx context.Context, ev event.Event) (*jetstream.PubAck, error)
}) {
	t := time.NewTicker(g.opts.TimerEvery)
	defer t.Stop()
	sent := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		evs, err := g.due(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Warn().Err(err).Msg("degrader: due deadlines")
			}
			continue
		}
		now := time.Now()
		for _, ev := range evs {
			if at, ok := sent[ev.ID()]; ok && now.Sub(at) < 30*time.Second {
				continue // sent; its fold is on its way
			}
			if _, err := pub.Publish(ctx, ev); err != nil {
				g.log.Warn().Err(err).Msg("degrader: publish timer")
				continue
			}
			sent[ev.ID()] = now
		}
		for id, at := range sent {
			if now.Sub(at) > 10*time.Minute {
				delete(sent, id)
			}
		}
	}
}

func (g *Degrader) due(ctx context.Context) ([]event.Event, error) {
	rows, err := g.pool.Query(ctx, `
		SELECT tenant_id, tool_name, state, version, expires FROM health_tools
		WHERE expires IS NOT NULL AND expires <= now() AND state IN ('quarantined', 'probation')
		ORDER BY expires LIMIT 1000`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		var tenant, tool, state string
		var version int64
		var due time.Time
		if err := rows.Scan(&tenant, &tool, &state, &version, &due); err != nil {
			return nil, err
		}
		setBy := TypeToolQuarantined
		if State(state) == Probation {
			setBy = TypeToolRecovered
		}
		ev, err := timerEvent(g.opts.Consumer, tenant, tool, due, version, setBy)
		if err != nil {
			g.log.Error().Err(err).Str("tenant", tenant).Str("tool", tool).Msg("degrader: timer event")
			continue
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// timerEvent is the clock fact for tool's deadline due, set by the
// transition to version (its causation).
func timerEvent(consumer, tenant, tool string, due time.Time, version int64, setBy string) (event.Event, error) {
	setter := event.New()
	setter.SetID(bus.DeriveID(consumer, tenant, setBy, fmt.Sprintf("state:%s@%d", tool, version)))
	setter.SetExtension(bus.ExtTenant, tenant)
	return bus.NewStateResult(consumer, TypeTimer, tenant, tool+"@"+rfc3339(due), version, setter,
		map[string]any{"tool_name": tool, "due_at": rfc3339(due)})
}

// Consumer runs the degrader, configured by AGENTQ_DEGRADE_*, in an agentq
// process.
var Consumer = NewConsumer(Options{})

// ParamsFrom turns the configuration into detector parameters.
func ParamsFrom(c config.Degrade) Params {
	p := DefaultParams()
	p.FastEvidence, p.SlowEvidence, p.Shift = c.Evidence, c.SlowEvidence, c.Shift
	p.QuarantineAt, p.QuarantineAfter, p.MinCalls = c.QuarantineEvidence, c.QuarantineAfter, c.MinCalls
	p.Threshold, p.RatingThreshold = c.Threshold, c.RatingThreshold
	p.QuarantineBase, p.QuarantineMax = c.QuarantineBase, c.QuarantineMax
	p.OffenceDecay, p.Probation, p.MaxQuarantinedShare = c.OffenceDecay, c.Probation, c.MaxQuarantinedShare
	return p
}

// NewConsumer returns the degrader as an app consumer. Options left zero
// come from the process configuration.
func NewConsumer(opts Options) app.Consumer {
	name := opts.Consumer
	if name == "" {
		name = "degrader"
	}
	return app.Consumer{Name: name, Run: func(ctx context.Context, d *app.Deps) error {
		opts := opts
		if opts.Params == (Params{}) {
			opts.Params = ParamsFrom(d.Config.Degrade)
		}
		if opts.Poll <= 0 {
			opts.Poll = d.Config.Degrade.Poll
		}
		if opts.TimerEvery <= 0 {
			opts.TimerEvery = d.Config.Degrade.TimerEvery
		}
		opts = opts.withDefaults()
		if err := opts.Params.Validate(); err != nil {
			return fmt.Errorf("degrader configuration (AGENTQ_DEGRADE_*): %w", err)
		}
		if err := database.EnsureFence(ctx, d.Pool, opts.Consumer); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		m := newMetrics(d.Registry)
		if d.Registry != nil {
			_ = d.Registry.Register(NewStateCollector(d.Pool)) // already registered by another copy in this process: fine
		}
		g := New(d.Pool, d.Outbox, opts, d.Log, m.observe(d.Log))
		r, err := bus.NewRunner(d.JS, d.Schemas, g.Handle, d.Config.Runner(opts.Consumer, Subjects...), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		bg, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{}, 2)
		go func() { g.loop(bg, d.JS); done <- struct{}{} }()
		go func() { g.timers(bg, d.Publisher); done <- struct{}{} }()
		err = r.Run(ctx)
		stop()
		<-done
		<-done
		return err
	}}
}

// RebuildTarget is the degrader as agentq replay rebuilds it: the same
// store, then the fold of each batch's tenants up to the batch's last
// sequence (the rebuild reads the stream in order). Transitions that live
// processing had already published are not published again; those it had
// not (stored but not yet folded when the rebuild began) go to the outbox,
// for the relay of a running copy.
func RebuildTarget(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger) replay.Target {
	opts = opts.withDefaults()
	g := New(pool, relayOnly{out}, opts, log, nil)
	g.fold.rebuild = true
	return replay.Target{
		Consumer: opts.Consumer,
		Subjects: Subjects,
		Reset: func(ctx context.Context, tx pgx.Tx, tenant string) error {
			return Reset(ctx, tx, opts.Consumer, tenant)
		},
		Handler: func(ctx context.Context, batch []*bus.Delivery) []error {
			errs, maxSeq := g.store(ctx, batch)
			if maxSeq == 0 {
				return errs
			}
			tenants := map[string]bool{}
			for i, d := range batch {
				if errs[i] == nil && !tenants[d.Tenant] {
					tenants[d.Tenant] = true
					if err := g.fold.fold(ctx, d.Tenant, maxSeq); err != nil {
						for j := range batch {
							if errs[j] == nil {
								errs[j] = err
							}
						}
						return errs
					}
				}
			}
			return errs
		},
	}
}

// relayOnly stores results in the outbox and leaves them to the relay.
type relayOnly struct{ Sender }

func (relayOnly) Send(context.Context, []event.Event) error { return nil }
