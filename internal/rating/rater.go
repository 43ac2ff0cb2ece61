package rating

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/outbox"
)

// Options configures a Rater.
type Options struct {
	// Consumer names the durable consumer and the inbox. Default "rater".
	Consumer string
	// Rater holds the AGENTQ_RATER_* settings, taken as they are: load
	// them with config.Load, which supplies the defaults.
	Rater config.Rater
	// LLM rates events; nil rates every event with the rules (RulesRater).
	LLM Completer
	// Model is the LLM's model name: the rater field's fallback and the
	// choice of token counter. Required with LLM.
	Model string
	// Registerer receives the rater's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "rater"
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	s := o.Rater
	check(s.Sample >= 0 && s.Sample <= 1, "rater sample %v: want 0..1", s.Sample)
	if o.LLM != nil { // the rules use none of these
		check(s.Concurrency >= 1, "rater concurrency %d: want at least 1", s.Concurrency)
		check(s.DailyTokens >= 0, "rater daily tokens %d: must not be negative", s.DailyTokens)
		check(s.MaxInputTokens >= 64, "rater max input tokens %d: want at least 64", s.MaxInputTokens)
		check(s.Timeout > 0, "rater timeout must be positive")
		check(strings.TrimSpace(o.Model) != "", "the LLM's model name is required")
	}
	return errors.Join(errs...)
}

// Sender stores results in a transaction and publishes them after commit.
// *outbox.Outbox satisfies it; outbox.Discard publishes nothing.
type Sender interface {
	// Queue adds the statements that store evs to b, run in the effect's
	// transaction.
	Queue(b *pgx.Batch, evs ...event.Event) error
	// Send publishes evs once their transaction has committed.
	Send(ctx context.Context, evs []event.Event) error
}

var _ Sender = (*outbox.Outbox)(nil)

// Rating is one rating the rater gives an event.
type Rating struct {
	// Relevance and Correctness lie in [0, 1]; Score is their mean.
	Relevance   float64
	Correctness float64
	// Reason explains the rating: the model's words, or the rules that
	// applied.
	Reason string
	// Kind is KindLLM or KindRules; Rater is llm:<model> or RulesRater.
	Kind  string
	Rater string
	// Tokens is what the rating cost in LLM tokens (summary and failed
	// attempts included), 0 for a rating by the rules alone.
	Tokens int
	// LatencyMs is the wall time of the rating's LLM calls, 0 for the rules.
	LatencyMs int64
	// Injection reports that the untrusted text held instructions aimed
	// at the rater; the rating is then the rules', capped (see Rules).
	Injection bool
}

// Score is the rating published: the mean of relevance and correctness.
func (r Rating) Score() float64 { return round((r.Relevance + r.Correctness) / 2) }

// Rater rates batches of tool.executed and prompt.used events.
type Rater struct {
	pool    *pgxpool.Pool
	out     Sender
	opts    Options
	log     zerolog.Logger
	builder *chat.Builder
	counter chat.TokenCounter
	metrics *metrics
	pending *pending[outcome]
	// summaries keeps the model's summaries of outputs whose rating did
	// not happen (an outage of the rating call), for the next delivery.
	summaries *pending[summary]
	// unbilled holds the tokens spent and not charged yet.
	unbilled *charges
	// perEvent bounds one event's LLM work: a summary, and the rating
	// with one more attempt after junk, each within the LLM's timeout.
	perEvent time.Duration
}

// New returns a rater writing to pool and publishing through out.
func New(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger) (*Rater, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("rater options: %w", err)
	}
	return newRater(pool, out, opts, log), nil
}

func newRater(pool *pgxpool.Pool, out Sender, opts Options, log zerolog.Logger) *Rater {
	r := &Rater{
		pool: pool, out: out, opts: opts, log: log.With().Str("consumer", opts.Consumer).Logger(),
		builder:   chat.NewBuilder(),
		counter:   chat.CounterForModel(opts.Model),
		metrics:   newMetrics(opts.Registerer),
		pending:   newPending[outcome](pendingSize),
		summaries: newPending[summary](pendingSize),
		unbilled:  &charges{},
	}
	calls := ratingAttempts
	if opts.Rater.Summarize {
		calls++
	}
	// A second more than the calls' own timeouts, so the LLM client's
	// timeout (an outage) fires before this one (a cancellation).
	r.perEvent = time.Duration(calls)*opts.Rater.Timeout + time.Second
	return r
}

// EventTimeout is the longest one event's LLM work may take.
func (r *Rater) EventTimeout() time.Duration { return r.perEvent }

// LLM reports whether the rater asks a language model.
func (r *Rater) LLM() bool { return r.opts.LLM != nil }

// state is where an event of a batch stands.
type state int

const (
	stDecoded state = iota // decoded; decision pending
	stKnown                // applied before: nothing to do
	stDup                  // a repeat of an earlier event of the batch
	stSkip                 // not rated, by decision; claimed
	stLLM                  // to be rated by the LLM
	stRated                // rated; to be stored and published
	stFailed               // failed; err says how
)

type item struct {
	d      *bus.Delivery
	call   Call
	key    database.InboxKey
	state  state
	skip   string // reason of stSkip
	plan   *plan
	rating outcome
	first  *item // the earlier occurrence of a stDup
	err    error
}

// Skip reasons, the reason label of agentq_rater_skipped_total.
const (
	SkipSelfRated  = "self_rated"  // the event carries llm_rating and AGENTQ_RATER_RERATE is off
	SkipNotSampled = "not_sampled" // outside AGENTQ_RATER_SAMPLE
	SkipNoOutput   = "no_output"   // a successful call that carries no output: nothing to judge
	SkipBudget     = "budget"      // the tenant's AGENTQ_RATER_DAILY_TOKENS for the day is spent
)

// Handle is the rater's bus.BatchHandler:
//
//  1. decode every event;
//  2. with an LLM, ask the inbox which events were applied already, so a
//     redelivered event never pays for a second call, and read the
//     tenants' token spend of the events' days;
//  3. decide per event: skip it (self-rated, not sampled, no output, over
//     budget), rate it with the rules (no LLM configured, a failed call,
//     instructions aimed at the rater in its text), or with the LLM;
//  4. rate the LLM's events concurrently (AGENTQ_RATER_CONCURRENCY, each
//     within EventTimeout);
//  5. in one short transaction, claim every decided event in the inbox
//     and store the ratings, the token spend and the tool.rated /
//     prompt.rated outbox rows; publish them after commit.
//
// An event whose LLM call met an outage returns its error (bus.Unavailable:
// nak, pause, retry; nothing dead-lettered) and is not claimed; so does an
// event whose rating would not have started early enough to end within
// the handler's time (it is handed back, and rated on its next delivery). Ratings
// computed by a call whose transaction then failed are kept in memory for
// the retry, so a database hiccup does not pay for the calls twice.
func (r *Rater) Handle(ctx context.Context, batch []*bus.Delivery) []error {
	errs := make([]error, len(batch))
	items := make([]*item, len(batch))
	var live []*item
	for i, d := range batch {
		c, err := Decode(d)
		if err != nil {
			errs[i] = err
			continue
		}
		it := &item{d: d, call: c, key: database.InboxKey{Tenant: d.Tenant, EventID: d.Event.ID()}}
		items[i] = it
		live = append(live, it)
	}
	if len(live) == 0 {
		return errs
	}
	if err := r.decide(ctx, live); err != nil {
		err = database.Classify(err)
		for _, it := range live {
			it.state, it.err = stFailed, err
		}
	}
	r.rateLLM(ctx, live)
	if err := r.commit(ctx, live); err != nil {
		err = database.Classify(err)
		for _, it := range live {
			if it.state != stKnown && it.state != stFailed {
				it.state, it.err = stFailed, err
			}
		}
		r.log.Debug().Err(err).Int("events", len(live)).Msg("rating batch not committed")
	}
	r.charge(ctx)
	for i, it := range items {
		if it == nil {
			continue
		}
		if it.state == stDup {
			it.state, it.err = it.first.state, it.first.err
		}
		errs[i] = it.err
	}
	return errs
}

// decide sets every item's state but the LLM's outcome.
func (r *Rater) decide(ctx context.Context, items []*item) error {
	known, spent := map[database.InboxKey]bool{}, map[budgetKey]int64{}
	if r.LLM() {
		var err error
		if known, spent, err = r.lookup(ctx, items); err != nil {
			return err
		}
	}
	first := map[database.InboxKey]*item{}
	reserved := map[budgetKey]int64{}
	for _, it := range items {
		switch f := first[it.key]; {
		case known[it.key]:
			it.state = stKnown
			r.pending.drop(it.key)
			r.summaries.drop(it.key)
			continue
		case f != nil:
			it.state, it.first = stDup, f
			continue
		}
		first[it.key] = it
		c := it.call
		switch {
		case c.LLMRating != nil && !r.opts.Rater.Rerate:
			it.state, it.skip = stSkip, SkipSelfRated
		case !Sampled(it.key.Tenant, it.key.EventID, r.opts.Rater.Sample):
			it.state, it.skip = stSkip, SkipNotSampled
		case c.Success && !c.HasOutput:
			it.state, it.skip = stSkip, SkipNoOutput
		case !r.LLM() || !c.Success:
			// A failed call needs no model to tell it failed.
			it.state, it.rating = stRated, outcome{Rating: Rules(c)}
		default:
			if rt, ok := r.pending.get(it.key); ok {
				it.state, it.rating = stRated, rt // rated by an earlier call whose commit failed
				continue
			}
			if _, ok := DetectCall(c); ok {
				// The text addresses the rater: a model that obeys such
				// text cannot be trusted with it, and the rules never read
				// instructions.
				it.state, it.rating = stRated, outcome{Rules(c), "injection"}
				continue
			}
			p, err := r.newPlan(c)
			if err != nil {
				it.state, it.rating = stRated, outcome{Rating: Rules(c)}
				it.rating.Reason += "; no LLM prompt could be built: " + err.Error()
				continue
			}
			bk := budgetKey{it.key.Tenant, Day(it.d.Time)}
			p.key, p.budget = it.key, bk
			if _, ok := r.summaries.get(it.key); ok && p.summary != nil {
				p.estimate -= p.summaryEstimate // paid for already
			}
			// Spent: what the database holds, and what this copy spent
			// that no transaction has charged yet.
			if limit := r.opts.Rater.DailyTokens; limit > 0 && spent[bk]+r.unbilled.of(bk)+reserved[bk]+int64(p.estimate) > limit {
				it.state, it.skip = stSkip, SkipBudget
				continue
			}
			reserved[bk] += int64(p.estimate)
			it.state, it.plan = stLLM, p
		}
	}
	return nil
}

// errHandedBack is the outcome of an event whose rating did not start
// because the batch's time was used up: not its fault, nor a failure, nor
// an outage (the others of the batch went through: fetching goes on).
var errHandedBack = bus.Deferred(errors.New("the batch's time was used up before this event's rating started; handed back to be rated on its next delivery"))

// rateLLM rates the items in stLLM concurrently.
func (r *Rater) rateLLM(ctx context.Context, items []*item) {
	var todo []*item
	var ds []*bus.Delivery
	for _, it := range items {
		if it.state == stLLM {
			todo = append(todo, it)
			ds = append(ds, it.d)
		}
	}
	if len(todo) == 0 {
		return
	}
	byDelivery := make(map[*bus.Delivery]*item, len(todo))
	for _, it := range todo {
		byDelivery[it.d] = it
	}
	// Past the first wave, an event starts only if its worst case ends
	// before the last fifth of the handler's time, kept for the
	// transaction; the others are handed back unrated, to be rated on
	// their next delivery, rather than cut off mid-call.
	deadline, bounded := ctx.Deadline()
	cutoff := deadline.Add(-time.Until(deadline) / 5)
	var started atomic.Int64
	ratings, errs := bus.ForEach(ctx, ds, r.opts.Rater.Concurrency, r.perEvent, func(ctx context.Context, d *bus.Delivery) (outcome, error) {
		if n := started.Add(1); bounded && n > int64(r.opts.Rater.Concurrency) && time.Now().Add(r.perEvent).After(cutoff) {
			return outcome{}, errHandedBack
		}
		return r.rateWithLLM(ctx, byDelivery[d].plan)
	})
	for j, it := range todo {
		if err := errs[j]; err != nil {
			if !bus.IsUnavailable(err) && !bus.IsPermanent(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
				err = bus.Unavailable(fmt.Errorf("rating interrupted: %w", err))
			}
			it.state, it.err = stFailed, err
			r.eventLog(r.log.Debug(), it).Err(err).Msg("not rated now")
			continue
		}
		it.state, it.rating = stRated, ratings[j]
		r.pending.put(it.key, ratings[j])
		r.metrics.llmSeconds.Observe(float64(ratings[j].LatencyMs) / 1000)
	}
}

// commit records the decided items in one transaction and publishes the
// results after it.
func (r *Rater) commit(ctx context.Context, items []*item) error {
	var todo []*item
	for _, it := range items {
		if it.state == stSkip || it.state == stRated {
			todo = append(todo, it)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	keys := make([]database.InboxKey, len(todo))
	for j, it := range todo {
		// Claimed with its sequence: a republished copy rated first is
		// filed at the original's place when that arrives (Claimed.Moved).
		// The item's key stays without it: caches know an event by id.
		keys[j] = it.key
		keys[j].Seq = it.d.StreamSeq
	}
	tx, claimed, err := database.BeginClaim(ctx, r.pool, r.opts.Consumer, keys)
	if err != nil {
		return err
	}
	defer tx.Close(ctx)
	// Every token spent and not charged yet, by any event (rated or not,
	// this batch's or another's), is charged with this transaction, and
	// put back if it does not commit.
	spend := r.unbilled.take()
	committed := false
	defer func() {
		if !committed {
			r.unbilled.putBack(spend)
		}
	}()
	var rows []*item
	var results, send []event.Event
	for j, it := range todo {
		if !claimed.Fresh[j] || it.state != stRated {
			continue
		}
		rows = append(rows, it)
		ev, err := r.result(it)
		if err != nil {
			return bus.Permanent(err)
		}
		// A rating is a result of its event alone: withheld while the
		// tenant is rebuilt, it is stored all the same, and the relay
		// publishes it once the rebuild is complete (see internal/replay).
		results = append(results, ev)
		if !claimed.Withheld(it.key.Tenant) {
			send = append(send, ev)
		}
	}
	b := &pgx.Batch{}
	queueRatings(b, rows)
	for j, it := range todo {
		if claimed.Moved != nil && claimed.Moved[j] != 0 {
			b.Queue(`UPDATE ratings SET stream_seq = $3 WHERE tenant_id = $1 AND event_id = $2`, it.key.Tenant, it.key.EventID, int64(keys[j].Seq))
		}
	}
	queueSpend(b, spend)
	if err := r.out.Queue(b, results...); err != nil {
		return bus.Permanent(err)
	}
	if err := tx.Commit(ctx, b); err != nil {
		return fmt.Errorf("store ratings: %w", err)
	}
	committed = true
	for j, it := range todo {
		r.pending.drop(it.key)
		r.summaries.drop(it.key)
		if !claimed.Fresh[j] {
			continue
		}
		switch it.state {
		case stSkip:
			r.metrics.skipped.WithLabelValues(it.skip).Inc()
			r.eventLog(r.log.Debug(), it).Str("reason", it.skip).Msg("not rated")
		case stRated:
			r.metrics.ratings.WithLabelValues(it.rating.Kind).Inc()
			if it.rating.fallback != "" {
				r.metrics.fallbacks.WithLabelValues(it.rating.fallback).Inc()
			}
			r.metrics.tokens.Add(float64(it.rating.Tokens))
			e := r.log.Debug()
			if it.rating.fallback != "" {
				e = r.log.Warn().Str("fallback", it.rating.fallback)
			}
			r.eventLog(e, it).Str("rater", it.rating.Rater).Float64("rating", it.rating.Score()).
				Int("tokens", it.rating.Tokens).Bool("injection_suspected", it.rating.Injection).Msg("rated")
		}
	}
	if err := r.out.Send(ctx, send); err != nil {
		// Committed: the relay publishes what is left in the outbox.
		r.log.Warn().Err(err).Int("events", len(send)).Msg("ratings left for the outbox relay")
	}
	return nil
}

func (r *Rater) eventLog(e *zerolog.Event, it *item) *zerolog.Event {
	return e.Str("event_id", it.key.EventID).Str("type", it.d.Event.Type()).Str("tenant", it.key.Tenant).Uint64("stream_seq", it.d.StreamSeq)
}
