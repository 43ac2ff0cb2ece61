package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
)

// Handle applies one event in one transaction: a prompt event to the read
// model; a request by accepting it (its job, its row and experiment.started
// committed together) or refusing it (lab.rejected); a cancellation by
// asking the job to stop. Results are sent after commit.
func (l *Lab) Handle(ctx context.Context, d *bus.Delivery) error {
	if isRowEvent(d) {
		return l.applyRows(ctx, []*bus.Delivery{d})[0]
	}
	if d.Event.Type() == typeIndexerRejected {
		if keep, err := keptRejection(d); err != nil || !keep {
			return err // a tool's rejection costs no transaction
		}
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return database.Classify(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // PGlite serialises transactions: never leave one open
	claimed, err := database.Claim(ctx, tx, l.opts.Consumer, []database.InboxKey{{Tenant: d.Tenant, EventID: d.Event.ID(), Seq: d.StreamSeq}})
	if err != nil {
		return database.Classify(err)
	}
	if !claimed.Fresh[0] {
		if claimed.Moved[0] == 0 || (d.Event.Type() != typePromptIndexed && d.Event.Type() != typeIndexerRejected) {
			return nil // applied before; only the indexer's results depend on the place
		}
		// A republished copy was applied first, at a later sequence: the
		// result (and its labels) count at this, the original's, place.
		if err := moveResult(ctx, tx, d.Tenant, d.Event.ID(), d.StreamSeq); err != nil {
			return database.Classify(err)
		}
		return database.Classify(tx.Commit(ctx))
	}
	withheld := claimed.Withheld(d.Tenant)
	var results []event.Event
	wake := false
	switch d.Event.Type() {
	case typePromptCreated:
		err = applyCreated(ctx, tx, d)
	case typePromptIndexed:
		err = applyIndexed(ctx, tx, d)
	case typeIndexerRejected:
		err = applyRejected(ctx, tx, d)
	case TypeRequested:
		if !l.answered(d) {
			results, wake, err = l.accept(ctx, tx, d, withheld)
		}
	case TypeCancelled:
		if !l.answered(d) {
			results, wake, err = l.cancel(ctx, tx, d)
		}
	default:
		err = bus.Permanentf("lab: unexpected event type %s", d.Event.Type())
	}
	if err == nil && (d.Event.Type() == TypeRequested || d.Event.Type() == TypeCancelled) {
		// A decided command is never decided again, not even by a rebuild
		// (see Reset).
		_, err = tx.Exec(ctx, `INSERT INTO lab_commands (tenant_id, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, d.Tenant, d.Event.ID())
	}
	if err != nil {
		return database.Classify(err)
	}
	b := &pgx.Batch{}
	if err := l.out.Queue(b, results...); err != nil {
		return bus.Permanent(err)
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return database.Classify(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return database.Classify(err)
	}
	// While the tenant is rebuilt its results wait in the outbox; the
	// relay publishes them once the rebuild is complete.
	if !withheld {
		if err := l.out.Send(ctx, results); err != nil {
			l.log.Warn().Err(err).Str("event_id", d.Event.ID()).Msg("lab: results left to the outbox relay")
		}
	}
	if wake {
		l.worker.Wake()
	}
	if d.Event.Type() == typePromptIndexed || d.Event.Type() == typeIndexerRejected {
		l.indexed.broadcast() // a run from feedback may be waiting for its candidates
	}
	return nil
}

// answered reports, in a rebuild, whether the stream holds the lab's
// answer to command d: experiment.started or lab.rejected. Commands decided
// before migration 00027 have no lab_commands row, and the database keeps
// no other trace of a refusal (its result left the outbox once published,
// and the inbox row does not say what the event was), so Reset cannot keep
// their inbox rows; the answer on the stream says they were decided. A
// cancellation accepted then has no answer of its own: cancel finds its
// experiment's cancellation requested and leaves it unanswered.
func (l *Lab) answered(d *bus.Delivery) bool {
	if l.published == nil {
		return false
	}
	for _, typ := range []string{TypeStarted, TypeRejected} {
		if l.published(bus.DeriveID(l.opts.Consumer, d.Tenant, typ, "event:"+d.Event.ID())) {
			return true
		}
	}
	return false
}

// experimentIDRE is the shape of an experiment id in every schema.
var experimentIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)

// accept validates a request and enqueues its experiment, or refuses it.
// While the tenant is rebuilt (withheld), a request naming a prompt or
// version the read model lacks waits for the rebuild instead.
func (l *Lab) accept(ctx context.Context, tx pgx.Tx, d *bus.Delivery, withheld bool) ([]event.Event, bool, error) {
	var r request
	if err := bus.DecodeData(d.Event.Data(), &r); err != nil {
		return nil, false, bus.Permanentf("experiment.requested data: %v", err)
	}
	id := r.ExperimentID
	if id == "" {
		id = d.Event.ID()
	}
	key := job.Key{Tenant: d.Tenant, Consumer: l.opts.Consumer, ID: id}
	// A request the lab accepted before (replayed after its inbox row was
	// pruned, say) is never run, nor refused, again.
	if same, err := l.accepted(ctx, tx, key, d.Event.ID()); err != nil || same {
		return nil, false, err
	}
	if !experimentIDRE.MatchString(id) {
		return l.rejected(d, reject(ReasonInvalid, nil, "the request's event id %q cannot name an experiment: give experiment_id", id))
	}
	e, rej := l.checkRequest(&r)
	if rej != nil {
		return l.rejected(d, rej)
	}
	r.ExperimentID = id
	if r.at = d.Event.Time(); r.at.IsZero() {
		r.at = d.Time
	}
	resolve := l.resolve
	if r.auto != nil {
		resolve = l.resolveAuto
	}
	spec, rej, err := resolve(ctx, tx, d.Tenant, d.Event.ID(), &r, e)
	if err != nil {
		return nil, false, err
	}
	if rej != nil {
		if (rej.code == ReasonUnknownPrompt || rej.code == ReasonUnknownVersion) && !l.rebuild &&
			(withheld || time.Since(d.Time) < l.opts.PromptWait) {
			// The version may be on its way through the indexer, or
			// through the rebuild of the read model.
			return nil, false, bus.Deferred(rej)
		}
		return l.rejected(d, rej)
	}
	spec.Trace = bus.Trace(d.Event)
	payload, err := json.Marshal(spec)
	if err != nil {
		return nil, false, bus.Permanentf("experiment %s: %v", id, err)
	}
	created, err := job.Enqueue(ctx, tx, job.New{Key: key, Kind: jobKind, Payload: payload})
	if errors.Is(err, job.ErrConflict) {
		return l.rejected(d, reject(ReasonDuplicate, map[string]any{"experiment_id": id},
			"experiment id %s is taken by another request of this tenant: give another experiment_id", id))
	}
	if err != nil || !created {
		return nil, false, err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO lab_experiments (tenant_id, experiment_id, request_event_id, prompt_id, name,
			baseline_version, candidate_versions, total_trials, model, judge_model)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6, $7, $8, $9, $10)`,
		d.Tenant, id, d.Event.ID(), spec.PromptID, spec.Name, spec.Baseline, spec.Candidates(), spec.planned(),
		spec.Model, spec.JudgeModel); err != nil {
		return nil, false, fmt.Errorf("store experiment %s: %w", id, err)
	}
	if spec.Auto != nil && spec.Auto.Incremental {
		if err := markAnalysed(ctx, tx, d.Tenant, id, spec.Auto.window); err != nil {
			return nil, false, err
		}
	}
	var running int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant_id = $1 AND consumer = $2 AND state = 'running'`,
		d.Tenant, l.opts.Consumer).Scan(&running); err != nil {
		return nil, false, fmt.Errorf("count running experiments: %w", err)
	}
	data := map[string]any{
		"experiment_id": id, "prompt_id": spec.PromptID, "baseline_version": spec.Baseline,
		"candidate_versions": spec.Candidates(), "test_query_count": len(spec.Queries),
		"repetitions": spec.Repetitions, "total_trials": spec.Trials(),
		"model": spec.Model, "judge_model": spec.JudgeModel, "auto": false,
		// Informative: the tenant's slots may free up before the worker looks.
		"queued": running >= l.opts.Lab.MaxRunning,
	}
	if spec.Name != "" {
		data["name"] = spec.Name
	}
	startedAuto(data, spec)
	ev, err := bus.NewResult(l.opts.Consumer, TypeStarted, d.Event, data)
	if err != nil {
		return nil, false, bus.Permanent(err)
	}
	return []event.Event{ev}, true, nil
}

// accepted reports whether the job key exists for the request eventID.
func (l *Lab) accepted(ctx context.Context, tx pgx.Tx, key job.Key, eventID string) (bool, error) {
	s, err := job.Get(ctx, tx, key)
	if errors.Is(err, job.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var p struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(s.Payload, &p)
	return p.RequestID == eventID, nil
}

// cancelRequest is experiment.cancelled's data.
type cancelRequest struct {
	ExperimentID string `json:"experiment_id"`
	Reason       string `json:"reason"`
	CancelledBy  string `json:"cancelled_by"`
}

// cancel asks a queued or running experiment to stop; its job's end
// publishes experiment.failed (reason_code cancelled).
func (l *Lab) cancel(ctx context.Context, tx pgx.Tx, d *bus.Delivery) ([]event.Event, bool, error) {
	var c cancelRequest
	if err := bus.DecodeData(d.Event.Data(), &c); err != nil {
		return nil, false, bus.Permanentf("experiment.cancelled data: %v", err)
	}
	reason := c.Reason
	if reason == "" {
		reason = "cancelled"
	}
	if c.CancelledBy != "" {
		reason += " (by " + c.CancelledBy + ")"
	}
	st, err := job.RequestCancel(ctx, tx, job.Key{Tenant: d.Tenant, Consumer: l.opts.Consumer, ID: c.ExperimentID}, reason)
	if errors.Is(err, job.ErrNotFound) {
		return l.rejected(d, reject(ReasonUnknownExp, map[string]any{"experiment_id": c.ExperimentID},
			"no experiment %s in tenant %s to cancel", c.ExperimentID, d.Tenant))
	}
	if err != nil {
		return nil, false, err
	}
	if st.Terminal() && l.rebuild {
		// Unanswered on the stream (see answered) and undecided by the
		// lab's record: accepted before the lab recorded its decisions,
		// or by none yet. A cancellation the experiment had accepted was
		// this one or an earlier one, and the experiment's end answers
		// both: never refused again after the fact.
		js, err := job.Get(ctx, tx, job.Key{Tenant: d.Tenant, Consumer: l.opts.Consumer, ID: c.ExperimentID})
		if err != nil {
			return nil, false, err
		}
		if js.CancelRequested {
			return nil, false, nil
		}
	}
	if st.Terminal() {
		return l.rejected(d, reject(ReasonFinished, map[string]any{"experiment_id": c.ExperimentID, "state": string(st)},
			"experiment %s has already ended (%s): nothing to cancel", c.ExperimentID, st))
	}
	return nil, true, nil
}

// rejected is lab.rejected for the delivery.
func (l *Lab) rejected(d *bus.Delivery, r *rejection) ([]event.Event, bool, error) {
	data := map[string]any{"reason_code": r.code, "reason": r.reason, "event_type": d.Event.Type(), "event_id": d.Event.ID()}
	if r.details != nil {
		data["details"] = r.details
	}
	ev, err := bus.NewResult(l.opts.Consumer, TypeRejected, d.Event, data)
	if err != nil {
		return nil, false, bus.Permanent(err)
	}
	l.log.Info().Str("event_id", d.Event.ID()).Str("tenant", d.Tenant).Str("reason_code", r.code).Str("reason", r.reason).Msg("lab: request refused")
	return []event.Event{ev}, false, nil
}
