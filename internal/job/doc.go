// Package job runs slow work (an experiment: versions × queries ×
// repetitions, each an LLM call) as a job leased from Postgres instead of a
// message held for minutes. A consumer accepts the request in one short
// transaction — its inbox claim, Enqueue, and its `started` result in the
// outbox — and acks; a Worker in any copy of the consumer then runs the job.
//
// # Lifecycle
//
//	queued ──lease──> running ──> succeeded | failed | cancelled
//	   ^                 │
//	   └──── release ────┘  (transient error with backoff, outage, graceful stop)
//
// A job is named by Key (tenant, consumer, id chosen by the caller, e.g. the
// experiment id). Enqueue inserts it in the caller's transaction and is
// idempotent: a key that exists already is a no-op (created=false), or
// ErrConflict when the request differs.
//
// # Leases and fencing
//
// A Worker leases due jobs with one UPDATE over a `FOR UPDATE SKIP LOCKED`
// selection, so copies never take the same job: queued jobs whose backoff has
// passed, and running jobs whose lease expired (their worker crashed or lost
// the database: the job is taken over). Each lease increments attempts and
// the job's lease token. While the handler runs, a heartbeat extends the
// lease every Options.Heartbeat; when it finds the lease gone (another
// worker's token) or cannot renew it before it would expire, it cancels the
// handler's context with cause ErrLeaseLost; when it finds a cancel request,
// with a *CancelledError (errors.Is ErrCancelled).
//
// Every write a worker makes about a job — a step's output, the outcome, a
// release — is fenced: it happens only if the job is still running under the
// worker's lease token (the row is locked while checked), so a worker that
// lost its lease cannot write anything, whatever its clock says.
//
// # Steps
//
// A handler checkpoints its work with Job.Step: a step already recorded by an
// earlier attempt returns its stored output without running again, so a job
// taken over after a crash resumes where it was. Each step's output is
// recorded in its own short statement; no transaction is held while a
// handler works.
//
// # Outcomes
//
// The handler's return decides, in one transaction under the fence:
// success → succeeded (even if a cancel came too late to stop the work);
// otherwise, cancel requested → cancelled; bus.Permanent error or
// panic → failed at once; bus.Unavailable error → released with backoff,
// the attempt given back (outages do not spend the budget, as in the bus);
// other errors → released with backoff until Options.MaxAttempts, then
// failed. A job whose attempts all ended without an outcome (crashes) is
// failed when leased past MaxAttempts. Options.OnDone runs inside the
// transaction that records a terminal outcome, so a result event written to
// the outbox there commits with it: exactly one terminal outcome, and one
// OnDone, commits per job.
//
// RequestCancel marks a job in the caller's transaction (the consumer
// applying experiment.cancelled). A running job's handler is cancelled at the
// next heartbeat; a queued one is finished as cancelled by the next lease
// without running its handler; a finished one is left as it is.
//
// On stop, a Worker leases nothing more, lets running handlers finish for
// Options.Grace, then cancels them with cause ErrStopping and releases their
// leases at once (attempt given back), so another copy takes them over
// without waiting for the lease to expire.
//
// # Replay
//
// Replay does nothing here. A replayed or redelivered request is either
// recognised by the consumer's inbox or finds its job row: Enqueue returns
// created=false and nothing runs again. A consumer rebuilding its state from
// scratch takes a job's outcome from the result events (experiment.completed)
// in the stream, never by enqueueing again.
package job
