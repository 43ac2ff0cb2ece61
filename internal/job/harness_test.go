package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/testenv"
)

// harness is one test's tenant and consumer (workers lease by consumer, so
// tests running side by side never take each other's jobs), and a record
// of every OnDone call.
type harness struct {
	t        *testing.T
	pool     *pgxpool.Pool
	tenant   string
	consumer string

	mu    sync.Mutex
	calls map[string][]job.Outcome // OnDone calls by job id, committed or not
	fail  map[string]int           // OnDone failures still to inject, by job id
}

func newHarness(t *testing.T) *harness {
	tenant := testenv.Tenant(t)
	return &harness{
		t: t, pool: testenv.Pool(t), tenant: tenant, consumer: "jobtest-" + tenant,
		calls: map[string][]job.Outcome{}, fail: map[string]int{},
	}
}

func (h *harness) key(id string) job.Key {
	return job.Key{Tenant: h.tenant, Consumer: h.consumer, ID: id}
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	h.t.Cleanup(cancel)
	return ctx
}

// enqueue stores a job in a transaction of its own.
func (h *harness) enqueue(id, kind, payload string) bool {
	h.t.Helper()
	var created bool
	h.inTx(func(tx pgx.Tx) error {
		var err error
		created, err = job.Enqueue(h.ctx(), tx, job.New{Key: h.key(id), Kind: kind, Payload: json.RawMessage(payload)})
		return err
	})
	return created
}

// inTx runs fn in a transaction and commits it.
func (h *harness) inTx(fn func(pgx.Tx) error) {
	h.t.Helper()
	ctx := h.ctx()
	tx, err := h.pool.Begin(ctx)
	require.NoError(h.t, err)
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx) // never leave a transaction open: PGlite would block every other connection
		require.NoError(h.t, err)
	}
	require.NoError(h.t, tx.Commit(ctx))
}

func (h *harness) status(id string) job.Status {
	h.t.Helper()
	s, err := job.Get(h.ctx(), h.pool, h.key(id))
	require.NoError(h.t, err)
	return s
}

func (h *harness) state(id string) job.State {
	h.t.Helper()
	return h.status(id).State
}

// onDone records the call and, in the completing transaction, a marker
// row (a step named done:<state>): a marker exists only if the outcome
// committed, which is what "OnDone's writes commit with the outcome" means.
func (h *harness) onDone(ctx context.Context, tx pgx.Tx, j *job.Job, o job.Outcome) error {
	h.mu.Lock()
	h.calls[j.ID] = append(h.calls[j.ID], o)
	fail := h.fail[j.ID] > 0
	if fail {
		h.fail[j.ID]--
	}
	h.mu.Unlock()
	if _, err := tx.Exec(ctx, `
		INSERT INTO job_steps (tenant_id, consumer, job_id, step, output, attempt)
		VALUES ($1, $2, $3, 'done:' || $4, 'null', $5)`, j.Tenant, j.Consumer, j.ID, string(o.State), j.Attempt); err != nil {
		return err
	}
	if fail {
		return errors.New("injected OnDone failure")
	}
	return nil
}

func (h *harness) doneCalls(id string) []job.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]job.Outcome(nil), h.calls[id]...)
}

// committedDone returns the states of the OnDone markers that committed.
func (h *harness) committedDone(id string) []string {
	h.t.Helper()
	rows, err := h.pool.Query(h.ctx(), `
		SELECT substr(step, 6) FROM job_steps
		WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 AND step LIKE 'done:%' ORDER BY step`,
		h.tenant, h.consumer, id)
	require.NoError(h.t, err)
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(h.t, err)
	return states
}

// options returns fast test settings for this harness's consumer.
func (h *harness) options(owner string) job.Options {
	return job.Options{
		Consumer:    h.consumer,
		Owner:       owner,
		Lease:       2 * time.Second,
		Heartbeat:   100 * time.Millisecond,
		Poll:        50 * time.Millisecond,
		Backoff:     []time.Duration{10 * time.Millisecond},
		Grace:       2 * time.Second,
		Concurrency: 1,
		OnDone:      h.onDone,
	}
}

// run is a worker running in the background.
type run struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a worker until stopped (at the latest when the test ends).
func (h *harness) start(pool *pgxpool.Pool, opts job.Options, handler job.Handler) *run {
	h.t.Helper()
	w, err := job.NewWorker(pool, opts, handler, testenv.Logger(h.t))
	require.NoError(h.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	h.t.Cleanup(func() { _ = r.stop() })
	return r
}

// signal cancels Run's context: the worker begins to stop.
func (r *run) signal() { r.cancel() }

// wait returns Run's error once it has returned.
func (r *run) wait() error {
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(30 * time.Second):
			r.err = errors.New("worker did not stop within 30s")
		}
	})
	return r.err
}

func (r *run) stop() error {
	r.signal()
	return r.wait()
}

// counter counts calls by key.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) inc(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
	return c.n[k]
}

func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}
