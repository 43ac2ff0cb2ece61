package job

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// Job is one leased attempt at a job, handed to the Handler. Its methods
// are safe for concurrent use, so a handler may run steps in parallel.
type Job struct {
	Key
	Kind    string
	Payload json.RawMessage
	// Attempt counts the attempts charged to this job, this one included:
	// 1 on the first run, more after a retry or a takeover after a crash;
	// a lease given back (an outage, a stop) does not count.
	Attempt   int
	CreatedAt time.Time

	token           int64     // the fencing token of this lease
	leasedAt        time.Time // local time just before the lease was taken
	cancelRequested bool
	cancelReason    string
	w               *Worker

	mu     sync.Mutex
	loaded bool
	done   map[string]json.RawMessage // steps recorded by any attempt
}

// stepWriteTimeout bounds recording a step's output. The write uses a
// context detached from the handler's, so output computed just before a
// cancellation or a stop is still kept for the next attempt.
const stepWriteTimeout = 10 * time.Second

// Step runs fn once per job and key. If an attempt of this job recorded key
// already, Step returns that output (as stored: jsonb, so whitespace and key
// order may differ) without calling fn. Otherwise it calls fn and records
// its output — nil is recorded as null — then returns it; recording is
// fenced, so when this worker has lost the lease Step returns ErrLeaseLost
// and the output is not kept. A database that cannot be reached to load or
// record steps is a bus.Unavailable error: returned by the handler, it
// spends no attempt. fn's error is returned wrapped, its
// classification (bus.Permanent, bus.Unavailable) intact, and nothing is
// recorded. When two concurrent calls run the same key, the first recorded
// output is returned to both.
func (j *Job) Step(ctx context.Context, key string, fn func(ctx context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	if key == "" {
		return nil, bus.Permanentf("job %s: empty step key", j.ID)
	}
	if out, ok, err := j.recorded(ctx, key); err != nil || ok {
		return out, err
	}
	out, err := fn(ctx)
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", key, err)
	}
	out, err = jsonOrNull(out)
	if err != nil {
		return nil, fmt.Errorf("step %s output: %w", key, err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepWriteTimeout)
	defer cancel()
	stored, err := j.record(wctx, key, out)
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", key, err)
	}
	return stored, nil
}

// StepJSON is Step for a value of type T, encoded and decoded as JSON.
func StepJSON[T any](ctx context.Context, j *Job, key string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	out, err := j.Step(ctx, key, func(ctx context.Context) (json.RawMessage, error) {
		r, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(r)
	})
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, bus.Permanent(fmt.Errorf("step %s: decode output: %w", key, err))
	}
	return v, nil
}

// Steps returns the output of every step recorded for the job so far, by
// this attempt or an earlier one, keyed by step: what a resumed handler
// reads to know where it stands before it starts new work (the lab sums
// the judge tokens its stored trials spent). The map is the caller's.
func (j *Job) Steps(ctx context.Context) (map[string]json.RawMessage, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.load(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(j.done))
	for k, v := range j.done {
		out[k] = v
	}
	return out, nil
}

// recorded returns key's stored output, loading every recorded step of the
// job on first use: one query however many steps a resumed job has.
func (j *Job) recorded(ctx context.Context, key string) (json.RawMessage, bool, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.load(ctx); err != nil {
		return nil, false, err
	}
	out, ok := j.done[key]
	return out, ok, nil
}

// load reads every recorded step of the job once; j.mu must be held.
func (j *Job) load(ctx context.Context) error {
	if !j.loaded {
		rows, err := j.w.pool.Query(ctx, `
			SELECT step, output FROM job_steps
			WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3`, j.Tenant, j.Consumer, j.ID)
		if err != nil {
			return fmt.Errorf("load steps of job %s: %w", j.ID, database.Classify(err))
		}
		done := map[string]json.RawMessage{}
		var step string
		var out []byte
		_, err = pgx.ForEachRow(rows, []any{&step, &out}, func() error {
			done[step] = json.RawMessage(out)
			return nil
		})
		if err != nil {
			return fmt.Errorf("load steps of job %s: %w", j.ID, database.Classify(err))
		}
		j.done, j.loaded = done, true
	}
	return nil
}

// record stores key's output if this lease still holds the job. FOR SHARE
// makes the check and the insert one fenced act: a takeover's UPDATE of the
// job row waits for this statement, and if it committed first the row is
// re-read with the new token and the check fails.
func (j *Job) record(ctx context.Context, key string, out json.RawMessage) (json.RawMessage, error) {
	var held bool
	var stored []byte
	err := j.w.pool.QueryRow(ctx, `
		WITH lease AS (
			SELECT 1 FROM jobs
			WHERE tenant_id = $1 AND consumer = $2 AND id = $3 AND state = 'running' AND lease_token = $4
			FOR SHARE
		), ins AS (
			INSERT INTO job_steps (tenant_id, consumer, job_id, step, output, attempt)
			SELECT $1, $2, $3, $5, $6::jsonb, $7 FROM lease
			ON CONFLICT DO NOTHING
			RETURNING output
		)
		SELECT EXISTS (SELECT 1 FROM lease), (SELECT output FROM ins)`,
		j.Tenant, j.Consumer, j.ID, j.token, key, string(out), j.Attempt).Scan(&held, &stored)
	if err != nil {
		return nil, fmt.Errorf("record: %w", database.Classify(err))
	}
	if !held {
		return nil, ErrLeaseLost
	}
	if stored == nil {
		// Another call of this attempt recorded the key first: its output wins.
		err := j.w.pool.QueryRow(ctx, `
			SELECT output FROM job_steps WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 AND step = $4`,
			j.Tenant, j.Consumer, j.ID, key).Scan(&stored)
		if err != nil {
			return nil, fmt.Errorf("record: %w", database.Classify(err))
		}
	}
	j.mu.Lock()
	j.done[key] = stored
	j.mu.Unlock()
	return stored, nil
}
