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
// the database: the job is taken over). Each lease increments the job's
// lease token; how attempts are counted is below. While the handler runs, a
// heartbeat extends the lease every Options.Heartbeat; when it finds the
// lease gone (another worker's token) it cancels the handler's context with
// cause ErrLeaseLost; when it cannot renew the lease before it would expire,
// with a cause that also matches ErrLeaseLost, and keeps trying; when it
// finds a cancel request, with a *CancelledError (errors.Is ErrCancelled).
//
// Every write a worker makes about a job — a step's output, the outcome, a
// release, a renewal — is fenced: it happens only if the job is still running
// under the worker's lease token (the row is locked while checked), so a
// worker that lost its lease cannot write anything, whatever its clock says.
// The token, not the lease's expiry, decides: a worker whose lease expired
// while nobody took the job over still holds it, and may renew it.
//
// # Attempts and outages
//
// Attempts are charged when a job is leased, and given back when the
// attempt ends for a reason that is not the job's: a bus.Unavailable error,
// a graceful stop, an outcome that could not be stored, and an outage
// longer than the lease. MaxAttempts therefore bounds the attempts that
// failed for the job's own reasons (transient errors) and the crashes.
//
// An outage is told from a crash like this. While a worker cannot reach
// the database, it cannot know whether another worker took its job over,
// so when its lease may have expired it stops the handler (cause
// ErrLeaseLost, as above) and waits for the database — renewing the lease
// and settling the attempt the moment the database answers, under the
// fence. If nobody took the job over, the attempt is given back and the
// job is due again at once (a resumed run finds its steps done). So that
// nobody takes it over when the database was away for everyone, a worker
// takes over expired leases only once it has reached the database without
// an outage for a whole lease, since it started or since its last outage:
// a holder that lived through the same outage is back well within that
// lease. A holder that is really gone is taken over one lease later than
// its lease expired, and that takeover is charged, as a crash must be to
// bound a job that kills its worker. A worker alone cut off from the
// database while other copies still reach it is, seen from the database,
// a crashed one: its jobs are taken over by those copies and the takeover
// is charged.
//
// # A bound per tenant
//
// Options.MaxRunningPerTenant bounds how many of one tenant's jobs run at
// once across every worker: the rest wait, in the order they fell due,
// while other tenants' jobs run. Workers lease under a transaction-level
// advisory lock per consumer, so two of them never fill the same free slot.
//
// # Steps
//
// A handler checkpoints its work with Job.Step: a step already recorded by an
// earlier attempt returns its stored output without running again, so a job
// taken over after a crash resumes where it was; Job.Steps lists what is
// recorded, for a handler that must know before it starts. Each step's output is
// recorded in its own short statement; no transaction is held while a
// handler works.
//
// # Outcomes
//
// The handler's return decides, in one transaction under the fence:
// success → succeeded (even if a cancel came too late to stop the work);
// otherwise, cancel requested → cancelled; stopped by a stopping worker,
// or by a lease that an outage left in doubt → released, due at once, the
// attempt given back; bus.Permanent error or panic → failed at once;
// bus.Unavailable error (Job.Step returns one when the database is
// unreachable) → released with backoff, the attempt given back (outages do
// not spend the budget, as in the bus); other errors → released with
// backoff until Options.MaxAttempts, then failed. A job whose attempts all
// ended without an outcome (crashes) is failed when leased past
// MaxAttempts. Options.OnDone runs inside the transaction that records a
// terminal outcome, so a result event written to the outbox there commits
// with it: exactly one terminal outcome, and one OnDone, commits per job.
// Options.AfterDone runs once that transaction has committed, so results
// OnDone stored are sent at once instead of waiting for the outbox relay.
//
// RequestCancel marks a job in the caller's transaction (the consumer
// applying experiment.cancelled). A running job's handler is cancelled at the
// next heartbeat; a queued one is finished as cancelled by the next lease
// without running its handler; a finished one is left as it is.
//
// On stop, a Worker leases nothing more, lets running handlers finish for
// Options.Grace, then cancels them with cause ErrStopping and releases their
// leases at once (attempt given back), so another copy takes them over
// without waiting for the lease to expire. An attempt still waiting for the
// database when the grace period ends is left to its lease.
//
// # Replay
//
// Replay does nothing here. A replayed or redelivered request is either
// recognised by the consumer's inbox or finds its job row: Enqueue returns
// created=false and nothing runs again. A consumer rebuilding its state from
// scratch takes a job's outcome from the result events (experiment.completed)
// in the stream, never by enqueueing again.
package job
