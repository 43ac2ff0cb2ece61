package job

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// Handler runs one attempt at a job and returns its result (JSON; nil is
// stored as SQL NULL) or an error classified as in the bus: bus.Permanent
// fails the job at once, bus.Unavailable retries it without spending an
// attempt, anything else retries it until Options.MaxAttempts. A panic
// fails the job.
//
// ctx is cancelled when the job is cancelled (cause: a *CancelledError),
// when the lease is lost or may be (errors.Is ErrLeaseLost), or when the
// worker stops after its grace period (ErrStopping): read context.Cause,
// and return promptly. Work that must survive an interruption goes through
// Job.Step.
type Handler func(ctx context.Context, j *Job) (result json.RawMessage, err error)

// Outcome is how a job ended.
type Outcome struct {
	State  State           // Succeeded, Failed or Cancelled
	Result json.RawMessage // the handler's result when Succeeded
	Err    error           // why, when Failed; a *CancelledError when Cancelled
}

// OnDone runs inside the transaction that records a job's terminal outcome,
// so what it writes (a result event in the outbox) commits with the outcome
// or not at all. If it returns an error, the outcome is not recorded: the
// job is released and tried again after a backoff (a resumed run finds its
// steps done), without spending an attempt.
type OnDone func(ctx context.Context, tx pgx.Tx, j *Job, o Outcome) error

// AfterDone runs once a job's terminal outcome has committed, outside any
// transaction: where results that OnDone stored in the outbox are sent at
// once, rather than left to the outbox relay. It runs at most once per
// committed outcome, in the worker's goroutine for the job, and may be
// skipped (the process dies first): what it sends must also be safe to
// leave to the relay.
type AfterDone func(ctx context.Context, j *Job, o Outcome)

// Options configures a Worker. Zero values take the documented defaults.
type Options struct {
	// Consumer names the jobs this worker runs (Key.Consumer). Required.
	Consumer string
	// Kinds are the job kinds this worker runs; empty means every kind of
	// Consumer.
	Kinds []string
	// Owner names this worker in lease_owner. Default host-pid-random.
	Owner string
	// Lease is how long a lease lasts without a heartbeat: after a crash,
	// another worker takes the job over this long after the last heartbeat
	// (and no sooner than this long after it started or its last outage).
	// Default 30s.
	Lease time.Duration
	// Heartbeat is how often a running job's lease is renewed and its
	// cancel request checked. Default Lease/3; must be below Lease.
	Heartbeat time.Duration
	// Poll is how often the worker looks for due jobs while it has a free
	// slot (Wake and a finished job also make it look). Default 1s.
	Poll time.Duration
	// Concurrency bounds the jobs this worker runs at once. Default 1.
	Concurrency int
	// MaxAttempts bounds the attempts of a job that keeps failing with
	// transient errors or crashing: past it the job fails. Outages and
	// stops spend none (see the package doc). Default 3.
	MaxAttempts int
	// Backoff gives the delay before the retry after the n-th attempt (n
	// from 1); the last entry repeats. Default 10s, 1m, 5m.
	Backoff []time.Duration
	// Grace bounds how long a stopping worker lets running handlers finish
	// before it cancels them and releases their jobs. Default 10s.
	Grace time.Duration
	// MaxRunningPerTenant bounds the jobs of one tenant running at once
	// across every worker of Consumer: past it, the tenant's due jobs wait
	// in the queue, in the order they fell due, while other tenants' jobs
	// run. Leases are then taken under a transaction-level advisory lock
	// per consumer, so concurrent workers never overshoot the bound. Zero
	// is unlimited.
	MaxRunningPerTenant int
	// OnDone, if set, runs in the transaction recording a terminal outcome.
	OnDone OnDone
	// AfterDone, if set, runs after a terminal outcome committed.
	AfterDone AfterDone
	// Metrics may be nil.
	Metrics *Metrics
}

func (o Options) withDefaults() Options {
	if o.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if o.Kinds == nil {
		o.Kinds = []string{} // NULL would match no kind at all
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = o.Lease / 3
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	if len(o.Backoff) == 0 {
		o.Backoff = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Consumer == "" {
		errs = append(errs, errors.New("consumer is required"))
	}
	if o.MaxRunningPerTenant < 0 {
		errs = append(errs, fmt.Errorf("max running per tenant %d must not be negative", o.MaxRunningPerTenant))
	}
	if o.Heartbeat >= o.Lease {
		errs = append(errs, fmt.Errorf("heartbeat %s must be below the lease %s", o.Heartbeat, o.Lease))
	}
	for _, d := range o.Backoff {
		if d < 0 {
			errs = append(errs, fmt.Errorf("negative backoff %s", d))
		}
	}
	return errors.Join(errs...)
}

// Worker leases due jobs of one consumer and runs them with a Handler. Run
// as many workers, in as many processes, as you like: a job is leased by
// one at a time.
type Worker struct {
	pool    *pgxpool.Pool
	opts    Options
	handler Handler
	log     zerolog.Logger
	m       workerMetrics
	wake    chan struct{}
	quit    chan struct{} // closed when Run returns
	// abandon is closed when a stopping worker's grace period is over:
	// outcomes still waiting for the database are given up then.
	abandon     chan struct{}
	abandonOnce sync.Once

	mu     sync.Mutex
	active map[*Job]context.CancelCauseFunc
	// down and upSince are this worker's view of the database: whether its
	// last statement met an outage, and since when its statements have
	// reached the database without one (see mayTakeOver).
	down    bool
	upSince time.Time
}

type workerMetrics struct {
	leased, leaseLost prometheus.Counter
	finished          map[State]prometheus.Counter
	released          map[string]prometheus.Counter
	runTime           prometheus.Observer
}

// Release reasons, the values of the reason label of jobs_released_total.
const (
	releaseError  = "error"  // a transient error, retried after a backoff
	releaseOutage = "outage" // bus.Unavailable, retried without spending the attempt
	releaseStop   = "stop"   // the worker stopped; due again at once
	releaseStore  = "store"  // recording the outcome (or OnDone) failed
)

// NewWorker returns a worker that runs handler on the jobs opts selects.
func NewWorker(pool *pgxpool.Pool, opts Options, handler Handler, log zerolog.Logger) (*Worker, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("job worker options: %w", err)
	}
	if handler == nil {
		return nil, errors.New("job worker: nil handler")
	}
	m := opts.Metrics
	wm := workerMetrics{
		leased:    m.leased.WithLabelValues(opts.Consumer),
		leaseLost: m.leaseLost.WithLabelValues(opts.Consumer),
		runTime:   m.runTime.WithLabelValues(opts.Consumer),
		finished:  map[State]prometheus.Counter{},
		released:  map[string]prometheus.Counter{},
	}
	for _, s := range []State{Succeeded, Failed, Cancelled} {
		wm.finished[s] = m.finished.WithLabelValues(opts.Consumer, string(s))
	}
	for _, r := range []string{releaseError, releaseOutage, releaseStop, releaseStore} {
		wm.released[r] = m.released.WithLabelValues(opts.Consumer, r)
	}
	return &Worker{
		pool:    pool,
		opts:    opts,
		handler: handler,
		log:     log.With().Str("component", "job-worker").Str("consumer", opts.Consumer).Str("owner", opts.Owner).Logger(),
		m:       wm,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		abandon: make(chan struct{}),
		active:  map[*Job]context.CancelCauseFunc{},
	}, nil
}

// Wake makes the worker look for due jobs now rather than at its next
// poll; call it after committing an Enqueue in the same process.
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// dbTimeout bounds the worker's own statements and transactions.
const dbTimeout = 30 * time.Second

// Run leases and runs jobs until ctx ends, then stops: it leases nothing
// more, waits up to Options.Grace for running handlers, cancels the rest
// with cause ErrStopping and releases their jobs. It returns nil once every
// handler has returned, or an error if some ignore their cancellation for
// another Grace (their leases then expire on their own). Call it once.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info().Strs("kinds", w.opts.Kinds).Int("concurrency", w.opts.Concurrency).Msg("job worker started")
	w.mu.Lock()
	w.upSince = time.Now() // a start is a reconnection: see mayTakeOver
	w.mu.Unlock()
	// Handlers outlive ctx by the grace period: theirs is detached from it
	// and cancelled on its own.
	base := context.WithoutCancel(ctx)
	defer close(w.quit)
	finished := make(chan struct{}, w.opts.Concurrency)
	active := 0
	poll := time.NewTicker(w.opts.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		if free := w.opts.Concurrency - active; free > 0 {
			jobs, err := w.lease(base, free)
			if err != nil {
				w.log.Warn().Err(err).Msg("leasing jobs failed; retrying at the next poll")
			}
			for _, j := range jobs {
				active++
				go func() {
					defer func() { finished <- struct{}{} }()
					w.work(base, j)
				}()
			}
		}
		select {
		case <-ctx.Done():
		case <-poll.C:
		case <-w.wake:
		case <-finished:
			active--
		}
	}

	w.log.Info().Int("running", active).Msg("job worker stopping")
	grace := time.NewTimer(w.opts.Grace)
	defer grace.Stop()
	var deadline <-chan time.Time
	for active > 0 {
		select {
		case <-finished:
			active--
		case <-grace.C:
			w.stopAll()
			deadline = time.After(w.opts.Grace)
		case <-deadline:
			return fmt.Errorf("job worker: %d handlers ignored their cancellation", active)
		}
	}
	w.log.Info().Msg("job worker stopped")
	return nil
}

func (w *Worker) stopAll() {
	w.abandonOnce.Do(func() { close(w.abandon) })
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cancel := range w.active {
		cancel(ErrStopping)
	}
}

// outage reports whether err, from one of the worker's own statements,
// says the database could not be reached: database.Classify's verdict, or
// the statement's own deadline passing (the worker's statements are small,
// so a timeout is an unresponsive database).
func outage(err error) bool {
	return err != nil && (bus.IsUnavailable(database.Classify(err)) || errors.Is(err, context.DeadlineExceeded))
}

// observe records what one of the worker's statements met: an outage, or
// the database reached.
func (w *Worker) observe(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, ErrLeaseLost): // an answer
		if w.down {
			w.down, w.upSince = false, time.Now()
		}
	case outage(err):
		w.down = true
	}
}

// mayTakeOver reports whether this worker may take over running jobs whose
// lease expired: only once it has reached the database without an outage
// for a whole lease, since it started or since its last outage. A lease
// that expired while the database was unreachable to everyone is not the
// trace of a crash: its holder is coming back at the same moment as this
// worker, and renews it or records its outcome (giving the attempt back)
// within a heartbeat. A holder that is really gone is taken over one lease
// later.
func (w *Worker) mayTakeOver() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.down && time.Since(w.upSince) >= w.opts.Lease
}

// lease takes up to n due jobs in one statement: queued jobs whose backoff
// has passed (or that were cancelled), and running jobs whose lease expired
// when mayTakeOver allows. SKIP LOCKED lets copies lease concurrently
// without waiting on each other's rows; a row another copy leased
// meanwhile is re-checked once locked and skipped, since its lease_until
// has moved. Lease times are the database's clock, the one clock all
// workers share.
func (w *Worker) lease(base context.Context, n int) (jobs []*Job, err error) {
	ctx, cancel := context.WithTimeout(base, dbTimeout)
	defer cancel()
	defer func() { w.observe(err) }()
	sent := time.Now()
	if w.opts.MaxRunningPerTenant > 0 {
		return w.leaseCapped(ctx, n, sent)
	}
	rows, err := w.pool.Query(ctx, `
		WITH due AS (
			SELECT tenant_id, consumer, id FROM jobs
			WHERE consumer = $1 AND state IN ('queued', 'running')
			  AND (cardinality($2::text[]) = 0 OR kind = ANY ($2::text[]))
			  AND ((state = 'queued' AND (lease_until <= now() OR cancel_requested))
			    OR (state = 'running' AND $6 AND lease_until <= now()))
			ORDER BY lease_until
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		)
		UPDATE jobs j SET state = 'running', lease_owner = $4,
			lease_until = now() + make_interval(secs => $5),
			attempts = j.attempts + 1, lease_token = j.lease_token + 1,
			started_at = coalesce(j.started_at, now()), updated_at = now()
		FROM due
		WHERE j.tenant_id = due.tenant_id AND j.consumer = due.consumer AND j.id = due.id
		RETURNING `+leaseReturning,
		w.opts.Consumer, w.opts.Kinds, n, w.opts.Owner, w.opts.Lease.Seconds(), w.mayTakeOver())
	if err != nil {
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	return w.leased(rows, sent)
}

// leaseReturning is what a lease statement returns of each job it took.
const leaseReturning = `j.tenant_id, j.id, j.kind, j.payload, j.attempts, j.lease_token,
			j.cancel_requested, coalesce(j.cancel_reason, ''), j.created_at`

// leaseCapped is lease under Options.MaxRunningPerTenant. A queued job is
// taken only if its rank among its tenant's due queued jobs, plus the
// tenant's running jobs, stays within the bound; a cancelled queued job
// (it will not run) and an expired running job (it counts already) are
// taken as by lease. The advisory lock makes counting and leasing one act
// across workers: without it two workers could each see a free slot and
// both fill it.
func (w *Worker) leaseCapped(ctx context.Context, n int, sent time.Time) (jobs []*Job, err error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // PGlite serialises transactions: never leave one open
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('agentq.jobs.lease'), hashtext($1))`, w.opts.Consumer); err != nil {
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	rows, err := tx.Query(ctx, `
		WITH running AS (
			SELECT tenant_id, count(*) AS n FROM jobs
			WHERE consumer = $1 AND state = 'running'
			GROUP BY tenant_id
		), ranked AS (
			SELECT tenant_id, id, lease_until, created_at,
				CASE WHEN state = 'queued' AND NOT cancel_requested THEN
					row_number() OVER (PARTITION BY tenant_id, state = 'queued' AND NOT cancel_requested
					                   ORDER BY lease_until, created_at, id)
				END AS rank
			FROM jobs
			WHERE consumer = $1 AND state IN ('queued', 'running')
			  AND (cardinality($2::text[]) = 0 OR kind = ANY ($2::text[]))
			  AND ((state = 'queued' AND (lease_until <= now() OR cancel_requested))
			    OR (state = 'running' AND $6 AND lease_until <= now()))
		), chosen AS (
			SELECT r.tenant_id, r.id FROM ranked r LEFT JOIN running c ON c.tenant_id = r.tenant_id
			WHERE r.rank IS NULL OR r.rank + coalesce(c.n, 0) <= $7
		), due AS (
			SELECT tenant_id, consumer, id FROM jobs
			WHERE consumer = $1 AND (tenant_id, id) IN (SELECT tenant_id, id FROM chosen)
			  AND ((state = 'queued' AND (lease_until <= now() OR cancel_requested))
			    OR (state = 'running' AND $6 AND lease_until <= now()))
			ORDER BY lease_until, created_at, id
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		)
		UPDATE jobs j SET state = 'running', lease_owner = $4,
			lease_until = now() + make_interval(secs => $5),
			attempts = j.attempts + 1, lease_token = j.lease_token + 1,
			started_at = coalesce(j.started_at, statement_timestamp()), updated_at = now()
		FROM due
		WHERE j.tenant_id = due.tenant_id AND j.consumer = due.consumer AND j.id = due.id
		RETURNING `+leaseReturning,
		w.opts.Consumer, w.opts.Kinds, n, w.opts.Owner, w.opts.Lease.Seconds(), w.mayTakeOver(), w.opts.MaxRunningPerTenant)
	if err != nil {
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	if jobs, err = w.leased(rows, sent); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	w.countLeased(jobs)
	return jobs, nil
}

// leased reads the jobs a lease statement took.
func (w *Worker) leased(rows pgx.Rows, sent time.Time) (jobs []*Job, err error) {
	for rows.Next() {
		j := &Job{w: w, leasedAt: sent}
		j.Consumer = w.opts.Consumer
		var payload []byte
		if err := rows.Scan(&j.Tenant, &j.ID, &j.Kind, &payload, &j.Attempt, &j.token,
			&j.cancelRequested, &j.cancelReason, &j.CreatedAt); err != nil {
			rows.Close()
			return jobs, fmt.Errorf("lease jobs: %w", err)
		}
		j.Payload = payload
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		// A failed statement leased nothing: it is one transaction.
		return nil, fmt.Errorf("lease jobs: %w", err)
	}
	if w.opts.MaxRunningPerTenant == 0 {
		w.countLeased(jobs)
	}
	return jobs, nil
}

// countLeased records jobs as leased, once their lease has committed.
func (w *Worker) countLeased(jobs []*Job) {
	for _, j := range jobs {
		w.m.leased.Inc()
		w.jobLog(j).Debug().Msg("job leased")
	}
}

// work runs one attempt at j and records what came of it.
func (w *Worker) work(base context.Context, j *Job) {
	defer func() { w.m.runTime.Observe(time.Since(j.leasedAt).Seconds()) }()
	ctx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	w.mu.Lock()
	w.active[j] = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.active, j)
		w.mu.Unlock()
	}()

	var result json.RawMessage
	var err error
	switch {
	case j.cancelRequested: // cancelled while queued: the handler never runs
		err = &CancelledError{Reason: j.cancelReason}
	case j.Attempt > w.opts.MaxAttempts: // earlier attempts crashed or lost their lease
		err = bus.Permanent(fmt.Errorf("gave up: %d attempts ended without an outcome", j.Attempt-1))
	default:
		stop, beat := make(chan struct{}), make(chan struct{})
		go w.heartbeat(base, stop, cancel, j, beat)
		result, err = w.call(ctx, j)
		close(stop)
		<-beat
	}
	cause := context.Cause(ctx) // the first cancellation wins
	if err := w.settle(j, result, err, cause); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			w.m.leaseLost.Inc()
			w.jobLog(j).Warn().Err(err).Msg("job lease lost; another worker owns the job, this attempt writes nothing")
			return
		}
		w.jobLog(j).Error().Err(err).Msg("recording the job's outcome failed; its lease will expire and another attempt resumes it")
	}
}

func (w *Worker) call(ctx context.Context, j *Job) (result json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.jobLog(j).Error().Str("stack", string(debug.Stack())).Msgf("job handler panicked: %v", r)
			result, err = nil, bus.Permanent(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return w.handler(ctx, j)
}

// heartbeat renews j's lease every Heartbeat until stop is closed (or Run
// has returned). It cancels the handler's context with ErrLeaseLost when
// the lease is gone (another worker's token), with a *leaseInDoubt when
// renewals failed until the next one would come too late — the lease may
// have expired, and this worker cannot tell whether another took the job
// over — and with a *CancelledError when a cancel was requested. In doubt,
// it keeps trying: the moment the database answers, a lease nobody took
// over is renewed, so the handler winds down without being taken over, and
// settle records what came of the attempt under the fence. Its statements
// do not run under the handler's context: a renewal cut short when the
// handler returns would cost a connection.
func (w *Worker) heartbeat(base context.Context, stop <-chan struct{}, cancel context.CancelCauseFunc, j *Job, done chan<- struct{}) {
	defer close(done)
	expires := j.leasedAt.Add(w.opts.Lease) // measured from before the statement: never later than the database's
	inDoubt := false
	t := time.NewTicker(w.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-w.quit: // Run gave up on a handler that ignores its cancellation
			return
		case <-t.C:
		}
		sent := time.Now()
		// A renewal is worth waiting for as long as the lease lasts; in
		// doubt, for a heartbeat, so the next try comes soon.
		hctx, hcancel := context.WithDeadline(base, later(expires, sent.Add(w.opts.Heartbeat)))
		held, cancelled, reason, err := w.extend(hctx, j)
		hcancel()
		w.observe(err)
		switch {
		case err != nil:
			if !inDoubt && !time.Now().Add(w.opts.Heartbeat).Before(expires) {
				inDoubt = true
				cancel(&leaseInDoubt{err: err, outage: outage(err)})
				w.jobLog(j).Warn().Err(err).Msg("job lease not renewed before it expires; handler stopped, renewing when the database answers")
			} else if !inDoubt {
				w.jobLog(j).Warn().Err(err).Msg("job heartbeat failed; retrying")
			}
		case !held:
			cancel(ErrLeaseLost)
			return
		case cancelled:
			// Keep renewing while the handler winds down, so the job is not
			// taken over meanwhile; a repeated cancel keeps the first cause.
			cancel(&CancelledError{Reason: reason})
			expires = sent.Add(w.opts.Lease)
		default:
			if inDoubt {
				w.jobLog(j).Info().Msg("job lease renewed after the outage; nobody took the job over")
				inDoubt = false // logged once per outage; the handler stays cancelled
			}
			expires = sent.Add(w.opts.Lease)
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// leaseInDoubt is the cause of a handler's cancellation when its lease
// could not be renewed before it would expire. errors.Is(ErrLeaseLost)
// holds: the handler must stop, since another worker may own the job by
// now. Whether one does, the fence decides when the attempt settles; if
// none does and the renewals failed for an outage, the attempt is given
// back.
type leaseInDoubt struct {
	err    error // the last renewal's
	outage bool  // err was an outage
}

func (e *leaseInDoubt) Error() string {
	return ErrLeaseLost.Error() + ": not renewed before it expires: " + e.err.Error()
}

func (e *leaseInDoubt) Unwrap() []error { return []error{ErrLeaseLost, e.err} }

// extend renews j's lease if this worker still holds it and reports
// whether it does and whether a cancel was requested.
func (w *Worker) extend(ctx context.Context, j *Job) (held, cancelled bool, reason string, err error) {
	err = w.pool.QueryRow(ctx, `
		UPDATE jobs SET lease_until = now() + make_interval(secs => $5), updated_at = now()
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3 AND state = 'running' AND lease_token = $4
		RETURNING cancel_requested, coalesce(cancel_reason, '')`,
		j.Tenant, j.Consumer, j.ID, j.token, w.opts.Lease.Seconds()).Scan(&cancelled, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, "", nil
	}
	if err != nil {
		return false, false, "", fmt.Errorf("job heartbeat: %w", err)
	}
	return true, cancelled, reason, nil
}

// verdict is what settle decided: a terminal outcome, or a release.
type verdict struct {
	terminal bool
	outcome  Outcome
	delay    time.Duration // release: until the job is due again
	giveBack bool          // release: the attempt does not count
	reason   string        // release: metric label
	err      error         // release: the error kept on the row
}

// decide maps a handler's return to a verdict. cancelRequested is read
// from the locked job row, so a cancel that raced the handler's end counts.
func (w *Worker) decide(j *Job, result json.RawMessage, err, cause error, cancelRequested bool, cancelReason string) verdict {
	switch {
	case err == nil:
		return verdict{terminal: true, outcome: Outcome{State: Succeeded, Result: result}}
	case cancelRequested:
		return verdict{terminal: true, outcome: Outcome{State: Cancelled, Err: &CancelledError{Reason: cancelReason}}}
	case errors.Is(cause, ErrStopping):
		return verdict{giveBack: true, reason: releaseStop, err: err}
	case isOutageDoubt(cause):
		// The lease outlived an outage with nobody taking the job over (the
		// fence just held): the attempt was cut short by the outage, not by
		// the job. Due at once: the database is back.
		return verdict{giveBack: true, reason: releaseOutage, err: err}
	case bus.IsPermanent(err):
		return verdict{terminal: true, outcome: Outcome{State: Failed, Err: err}}
	case bus.IsUnavailable(err):
		return verdict{delay: w.backoff(j.Attempt), giveBack: true, reason: releaseOutage, err: err}
	case j.Attempt >= w.opts.MaxAttempts:
		return verdict{terminal: true, outcome: Outcome{State: Failed, Err: fmt.Errorf("attempt %d of %d: %w", j.Attempt, w.opts.MaxAttempts, err)}}
	default:
		return verdict{delay: w.backoff(j.Attempt), reason: releaseError, err: err}
	}
}

func (w *Worker) backoff(attempt int) time.Duration {
	i := min(max(attempt-1, 0), len(w.opts.Backoff)-1)
	return w.opts.Backoff[i]
}

// settle records the outcome of an attempt under the fence: the job row is
// locked only if this lease still holds it, else ErrLeaseLost and nothing
// is written. A handler cancelled because its lease was found taken writes
// nothing either: the job belongs to whoever holds it now. One cancelled
// because its lease was in doubt settles like any other, and the fence
// tells whether the lease is still its own.
//
// While the database is unreachable, settle waits for it, trying again
// every Heartbeat, until the worker's stop gives up (its grace period
// over): an outcome or a release that never reaches the database would
// leave the job to expire and be taken over, spending an attempt.
func (w *Worker) settle(j *Job, result json.RawMessage, herr, cause error) error {
	var doubt *leaseInDoubt
	if herr != nil && errors.Is(cause, ErrLeaseLost) && !errors.As(cause, &doubt) {
		return cause
	}
	if herr == nil {
		var err error
		if result, err = resultOrNil(result); err != nil {
			herr = bus.Permanent(fmt.Errorf("handler result: %w", err))
		}
	}
	for waited := false; ; waited = true {
		retry, err := w.settleOnce(j, result, herr, cause)
		w.observe(err)
		if !retry {
			if waited && err == nil {
				w.jobLog(j).Info().Msg("the database is back; the job's attempt is settled")
			}
			return err
		}
		if !waited {
			w.jobLog(j).Warn().Err(err).Msg("the database is unreachable; settling the job's attempt when it is back")
		}
		select {
		case <-time.After(w.opts.Heartbeat):
		case <-w.abandon:
			return fmt.Errorf("the worker stopped before the database came back: %w", err)
		}
	}
}

// settleOnce is one try of settle; retry is true when the database could
// not be reached.
func (w *Worker) settleOnce(j *Job, result json.RawMessage, herr, cause error) (retry bool, err error) {
	// Bounded by the lease, so a try begun during an outage ends soon after.
	ctx, cancel := context.WithTimeout(context.Background(), min(dbTimeout, w.opts.Lease))
	defer cancel()
	v, err := w.commit(ctx, j, result, herr, cause)
	if err == nil && v.terminal && w.opts.AfterDone != nil {
		// A context of its own: the settle's is bounded by the lease, and
		// sending results may take longer than a short lease.
		actx, acancel := context.WithTimeout(context.Background(), dbTimeout)
		w.opts.AfterDone(actx, j, v.outcome)
		acancel()
	}
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return false, err
	}
	if !errors.Is(err, errOnDone) && outage(err) {
		return true, err
	}
	// The database refused the outcome, or OnDone failed: release the job
	// for a later attempt, which finds its steps done.
	rel := verdict{delay: w.backoff(j.Attempt), giveBack: true, reason: releaseStore, err: err}
	if v.terminal {
		w.jobLog(j).Error().Err(err).Str("outcome", string(v.outcome.State)).Msg("recording the job's outcome failed; releasing it for another attempt")
	}
	if rerr := w.release(ctx, w.pool, j, rel); rerr != nil {
		return outage(rerr), errors.Join(err, rerr)
	}
	w.released(j, rel)
	return false, nil
}

// errOnDone marks a failure of Options.OnDone in commit's error.
var errOnDone = errors.New("job OnDone")

func isOutageDoubt(cause error) bool {
	var doubt *leaseInDoubt
	return errors.As(cause, &doubt) && doubt.outage
}

// commit locks j's row under the fence, decides, and records the verdict
// in one transaction, OnDone included for a terminal outcome.
func (w *Worker) commit(ctx context.Context, j *Job, result json.RawMessage, herr, cause error) (verdict, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return verdict{}, fmt.Errorf("settle job: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // never leave a transaction open: PGlite serialises them all
	var cancelRequested bool
	var cancelReason string
	err = tx.QueryRow(ctx, `
		SELECT cancel_requested, coalesce(cancel_reason, '') FROM jobs
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3 AND state = 'running' AND lease_token = $4
		FOR UPDATE`, j.Tenant, j.Consumer, j.ID, j.token).Scan(&cancelRequested, &cancelReason)
	if errors.Is(err, pgx.ErrNoRows) {
		return verdict{}, ErrLeaseLost
	}
	if err != nil {
		return verdict{}, fmt.Errorf("settle job: %w", err)
	}
	v := w.decide(j, result, herr, cause, cancelRequested, cancelReason)
	if !v.terminal {
		if err := w.release(ctx, tx, j, v); err != nil {
			return v, err
		}
		if err := tx.Commit(ctx); err != nil {
			return v, fmt.Errorf("settle job: %w", err)
		}
		w.released(j, v)
		return v, nil
	}
	var errText *string
	if v.outcome.Err != nil {
		s := v.outcome.Err.Error()
		errText = &s
	}
	var res *string
	if v.outcome.Result != nil {
		s := string(v.outcome.Result)
		res = &s
	}
	if _, err := tx.Exec(ctx, `
		UPDATE jobs SET state = $4, result = $5::jsonb, error = $6, lease_owner = NULL,
			lease_until = now(), finished_at = now(), updated_at = now()
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3`,
		j.Tenant, j.Consumer, j.ID, string(v.outcome.State), res, errText); err != nil {
		return v, fmt.Errorf("settle job: %w", err)
	}
	if w.opts.OnDone != nil {
		if err := w.opts.OnDone(ctx, tx, j, v.outcome); err != nil {
			return v, fmt.Errorf("%w: %w", errOnDone, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return v, fmt.Errorf("settle job: %w", err)
	}
	w.m.finished[v.outcome.State].Inc()
	ev := w.jobLog(j).Info()
	if v.outcome.State != Succeeded {
		ev = w.jobLog(j).Warn().Err(v.outcome.Err)
	}
	ev.Str("state", string(v.outcome.State)).Msg("job finished")
	return v, nil
}

// release puts j back in the queue, due after v.delay, if this lease still
// holds it.
func (w *Worker) release(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, j *Job, v verdict) error {
	giveBack := 0
	if v.giveBack {
		giveBack = 1
	}
	var errText *string
	if v.err != nil {
		s := v.err.Error()
		errText = &s
	}
	var ok bool
	err := db.QueryRow(ctx, `
		UPDATE jobs SET state = 'queued', lease_owner = NULL,
			lease_until = now() + make_interval(secs => $5),
			attempts = attempts - $6, error = coalesce($7, error), updated_at = now()
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3 AND state = 'running' AND lease_token = $4
		RETURNING true`,
		j.Tenant, j.Consumer, j.ID, j.token, v.delay.Seconds(), giveBack, errText).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrLeaseLost
	}
	if err != nil {
		return fmt.Errorf("release job: %w", err)
	}
	return nil
}

func (w *Worker) released(j *Job, v verdict) {
	w.m.released[v.reason].Inc()
	w.jobLog(j).Info().AnErr("cause", v.err).Str("reason", v.reason).Dur("due_in", v.delay).
		Bool("attempt_given_back", v.giveBack).Msg("job released for a later attempt")
}

func (w *Worker) jobLog(j *Job) *zerolog.Logger {
	l := w.log.With().Str("tenant", j.Tenant).Str("job_id", j.ID).Str("kind", j.Kind).Int("attempt", j.Attempt).Logger()
	return &l
}

// resultOrNil returns a handler's result for storage: nil stays nil (SQL
// NULL), anything else must be valid JSON.
func resultOrNil(b json.RawMessage) (json.RawMessage, error) {
	if b == nil {
		return nil, nil
	}
	return jsonOrNull(b)
}
