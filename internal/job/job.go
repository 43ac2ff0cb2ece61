package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
)

// State is where a job is in its lifecycle.
type State string

// The states of a job. Succeeded, Failed and Cancelled are terminal.
const (
	Queued    State = "queued"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool { return s == Succeeded || s == Failed || s == Cancelled }

var (
	// ErrNotFound: no job has the key. RequestCancel returns it for a cancel
	// that arrives before its request (the caller may retry it as transient)
	// or names a job that never existed.
	ErrNotFound = errors.New("job not found")
	// ErrConflict: Enqueue found a job with the same key but another kind or
	// payload — the id was reused for a different request. Enqueue returns
	// it marked bus.Permanent.
	ErrConflict = errors.New("job exists with another kind or payload")
	// ErrLeaseLost is the cause of a handler's context cancellation, and the
	// error of a step or outcome write, when the worker no longer holds the
	// job's lease (another worker has taken it over), or may not (the lease
	// could not be renewed before it expired: the fence decides later).
	ErrLeaseLost = errors.New("job lease lost")
	// ErrCancelled matches (errors.Is) every *CancelledError.
	ErrCancelled = errors.New("job cancelled")
	// ErrStopping is the cause of a handler's context cancellation when its
	// worker stops and the grace period is over. The job is released for
	// another worker.
	ErrStopping = errors.New("job worker stopping")
)

// CancelledError is the cause of a handler's context cancellation after
// RequestCancel, and the error of a cancelled job's Outcome.
type CancelledError struct {
	Reason string
}

func (e *CancelledError) Error() string {
	if e.Reason == "" {
		return ErrCancelled.Error()
	}
	return ErrCancelled.Error() + ": " + e.Reason
}

// Is makes errors.Is(err, ErrCancelled) hold.
func (e *CancelledError) Is(target error) bool { return target == ErrCancelled }

// Key names a job: the consumer that owns it, its tenant, and an id the
// caller chose (the experiment id), unique per consumer and tenant.
type Key struct {
	Tenant   string
	Consumer string
	ID       string
}

func (k Key) validate() error {
	if k.Tenant == "" || k.Consumer == "" || k.ID == "" {
		return bus.Permanentf("job key needs tenant, consumer and id: %+v", k)
	}
	return nil
}

// New describes a job to enqueue.
type New struct {
	Key
	// Kind selects the handler: a Worker runs only the kinds it is given.
	// Required.
	Kind string
	// Payload is the job's input, JSON; nil is stored as null.
	Payload json.RawMessage
}

// Querier runs one statement. A pgx.Tx satisfies it — pass the caller's
// transaction, so the job commits or rolls back with the rest of the
// event's effect — as do *pgxpool.Pool and *pgx.Conn.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ Querier = pgx.Tx(nil)

// Enqueue stores a queued job in q, normally the transaction that claims
// the request in the inbox and adds its `started` result to the outbox. A
// job with the same key that exists already is left as it is: created is
// false, and err is nil when kind and payload are equal (a redelivered or
// replayed request) or ErrConflict, marked permanent, when they differ.
func Enqueue(ctx context.Context, q Querier, j New) (created bool, err error) {
	if err := j.Key.validate(); err != nil {
		return false, err
	}
	if j.Kind == "" {
		return false, bus.Permanentf("job %s: kind is required", j.ID)
	}
	payload, err := jsonOrNull(j.Payload)
	if err != nil {
		return false, fmt.Errorf("job %s: payload: %w", j.ID, err)
	}
	err = q.QueryRow(ctx, `
		INSERT INTO jobs (tenant_id, consumer, id, kind, payload)
		VALUES ($1, $2, $3, $4, $5::jsonb)
		ON CONFLICT DO NOTHING
		RETURNING true`, j.Tenant, j.Consumer, j.ID, j.Kind, string(payload)).Scan(&created)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("enqueue job %s: %w", j.ID, err)
	}
	// A separate statement: it sees a row that a concurrent enqueue committed
	// while the insert waited on it, which the insert's snapshot does not.
	var same bool
	err = q.QueryRow(ctx, `
		SELECT kind = $4 AND payload = $5::jsonb FROM jobs
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3`,
		j.Tenant, j.Consumer, j.ID, j.Kind, string(payload)).Scan(&same)
	if err != nil {
		return false, fmt.Errorf("enqueue job %s: %w", j.ID, err)
	}
	if !same {
		return false, bus.Permanent(fmt.Errorf("enqueue job %s: %w", j.ID, ErrConflict))
	}
	return false, nil
}

// RequestCancel asks for the job's cancellation inside q, normally the
// transaction applying the cancel event, and returns the job's state when
// asked. A queued or running job ends cancelled (its handler's context is
// cancelled at the next heartbeat, with a *CancelledError carrying reason);
// a finished job is left as it is, and so is the reason of an earlier
// request. An unknown key returns ErrNotFound.
func RequestCancel(ctx context.Context, q Querier, key Key, reason string) (State, error) {
	if err := key.validate(); err != nil {
		return "", err
	}
	// The outer SELECT sees the row as it was before the UPDATE in the same
	// statement: the state it returns is the state the request found.
	var st State
	err := q.QueryRow(ctx, `
		WITH cancel AS (
			UPDATE jobs SET cancel_requested = true, cancel_reason = $4, updated_at = now()
			WHERE tenant_id = $1 AND consumer = $2 AND id = $3
			  AND state IN ('queued', 'running') AND NOT cancel_requested
		)
		SELECT state FROM jobs WHERE tenant_id = $1 AND consumer = $2 AND id = $3`,
		key.Tenant, key.Consumer, key.ID, reason).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("cancel job %s: %w", key.ID, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("cancel job %s: %w", key.ID, err)
	}
	return st, nil
}

// Status is a job as stored.
type Status struct {
	Key
	Kind       string
	Payload    json.RawMessage
	State      State
	Attempts   int
	LeaseOwner string // empty unless running
	// LeaseLeft is, by the database's clock, how long a running job's lease
	// has left (negative once it expired) or how long until a queued job is
	// due; zero for a finished job.
	LeaseLeft       time.Duration
	CancelRequested bool
	CancelReason    string
	Result          json.RawMessage // nil unless succeeded with a result
	Error           string          // the last failure, also while queued for a retry
	CreatedAt       time.Time
	UpdatedAt       time.Time
	StartedAt       *time.Time // first lease
	FinishedAt      *time.Time
}

// Get returns the job named by key, or ErrNotFound.
func Get(ctx context.Context, q Querier, key Key) (Status, error) {
	s := Status{Key: key}
	var owner, reason, errText *string
	var payload, result []byte
	var left float64
	err := q.QueryRow(ctx, `
		SELECT kind, payload, state, attempts, lease_owner,
		       CASE WHEN state IN ('queued', 'running') THEN extract(epoch FROM lease_until - now())::float8 ELSE 0 END,
		       cancel_requested, cancel_reason, result, error, created_at, updated_at, started_at, finished_at
		FROM jobs WHERE tenant_id = $1 AND consumer = $2 AND id = $3`,
		key.Tenant, key.Consumer, key.ID).Scan(&s.Kind, &payload, &s.State, &s.Attempts, &owner, &left,
		&s.CancelRequested, &reason, &result, &errText, &s.CreatedAt, &s.UpdatedAt, &s.StartedAt, &s.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{}, fmt.Errorf("get job %s: %w", key.ID, ErrNotFound)
	}
	if err != nil {
		return Status{}, fmt.Errorf("get job %s: %w", key.ID, err)
	}
	s.Payload, s.Result = payload, result
	s.LeaseLeft = time.Duration(left * float64(time.Second))
	s.LeaseOwner, s.CancelReason, s.Error = deref(owner), deref(reason), deref(errText)
	return s, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// jsonOrNull returns b, or null when b is empty; invalid JSON is a
// permanent error.
func jsonOrNull(b json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(b) {
		return nil, bus.Permanentf("invalid JSON")
	}
	return b, nil
}
