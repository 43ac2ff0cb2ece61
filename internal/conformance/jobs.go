package conformance

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// JobAdapter is what a consumer that runs slow work as leased jobs
// (internal/job) gives RunJobs. A job is submitted with an id and a number
// of steps; step i does its slow work (an LLM call, for the lab) by calling
// JobEnv.Work.Do(ctx, tenant, id, i) once and checkpoints the output with
// job.Step; the job's result carries the steps' outputs. Its job.Key is
// (tenant, Consumer, id), and its results go through the outbox
// (internal/outbox).
type JobAdapter struct {
	// Consumer is the consumer's name: the Consumer of its jobs' keys.
	Consumer string
	// ResultSubjects are the subjects of its results (tenant token "*"),
	// the results that end a job among them.
	ResultSubjects []string
	// Start runs one copy of the consumer — whatever accepts submissions
	// and cancellations, its job.Worker and its outbox relay — until Stop
	// or Kill. The copy reaches the database only at env.Config.DatabaseURL,
	// a proxy of its own that the suite cuts to kill it or to make an
	// outage, and takes its job.Options' timing from env.Options.
	Start func(t *testing.T, env JobEnv) Copy
	// Submit asks for job id of tenant with steps steps: an event
	// published with env.Publish, or a direct call on env.Pool.
	Submit func(t *testing.T, env JobEnv, tenant, id string, steps int)
	// Cancel asks for the cancellation of job id of tenant with reason, as
	// Submit does.
	Cancel func(t *testing.T, env JobEnv, tenant, id, reason string)
	// Result reads one event of ResultSubjects; ok is false for an event
	// that does not end a job (a started event, say).
	Result func(ev event.Event) (r JobResult, ok bool)
	// Expected is the Content of the result of job id when it succeeded and
	// its steps' outputs were outputs, in step order.
	Expected func(tenant, id string, outputs []string) any
}

// JobResult is a result that ends a job, as JobAdapter.Result reads it.
type JobResult struct {
	ID    string    // the job's id, as submitted
	State job.State // Succeeded, Failed or Cancelled
	// Reason says why a job failed or was cancelled; a cancellation's
	// contains the reason given to Cancel.
	Reason string
	// Content is what a job that succeeded produced, compared with
	// JobAdapter.Expected.
	Content any
}

// JobEnv is what a scenario gives the consumer.
type JobEnv struct {
	NATS *testenv.NATS
	// Config is a copy's configuration: this scenario's NATS, small
	// batches, a fast outbox relay. For Start, DatabaseURL is the copy's
	// own proxy; for Submit and Cancel, the database itself.
	Config config.Config
	// Pool is on the database itself.
	Pool *pgxpool.Pool
	// Options holds the timing every copy's job.Worker must take: Lease,
	// Heartbeat, Poll, Grace, MaxAttempts, Backoff. The copy sets the rest
	// (Consumer, Kinds, OnDone, Metrics).
	Options job.Options
	// Work is the jobs' slow work, played by the suite.
	Work *JobWork
}

// Publish publishes ev on the scenario's NATS, validated against its
// schema, and waits for the stream's ack.
func (e JobEnv) Publish(t *testing.T, ev event.Event) {
	t.Helper()
	reg, err := schemas.Load()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = bus.NewPublisher(e.NATS.JS, reg).Publish(ctx, ev)
	require.NoError(t, err)
}

// JobWork plays the slow work of the jobs' steps. Each execution of a step
// calls Do once; the suite counts executions, holds chosen steps until it
// lets them go, and sees held ones interrupted by their context.
type JobWork struct {
	mu    sync.Mutex
	steps map[jobStep]*jobStepRuns
}

type jobStep struct {
	tenant, job string
	step        int
}

type jobStepRuns struct {
	started, returned, interrupted int
	interruptedAt                  time.Time
	hold                           chan struct{} // nil: not held
}

// Do does step of job id of tenant and returns its output, the same for
// every execution. A held step waits until the suite lets it go, or until
// ctx is done: then it returns an error wrapping context.Cause(ctx), as a
// provider call cut off by a cancellation would.
func (w *JobWork) Do(ctx context.Context, tenant, id string, step int) (string, error) {
	w.mu.Lock()
	r := w.runs(jobStep{tenant, id, step})
	r.started++
	hold := r.hold
	w.mu.Unlock()
	var wait <-chan struct{} = hold
	if hold == nil {
		closed := make(chan struct{})
		close(closed)
		wait = closed
	}
	// A context done already interrupts even a step that is not held.
	if ctx.Err() == nil {
		select {
		case <-wait:
			w.mu.Lock()
			r.returned++
			w.mu.Unlock()
			return jobOutput(tenant, id, step), nil
		case <-ctx.Done():
		}
	}
	w.mu.Lock()
	r.interrupted++
	r.interruptedAt = time.Now()
	w.mu.Unlock()
	return "", fmt.Errorf("step %d of job %s interrupted: %w", step, id, context.Cause(ctx))
}

func (w *JobWork) runs(k jobStep) *jobStepRuns {
	if w.steps == nil {
		w.steps = map[jobStep]*jobStepRuns{}
	}
	r := w.steps[k]
	if r == nil {
		r = &jobStepRuns{}
		w.steps[k] = r
	}
	return r
}

// hold makes executions of the step wait until release.
func (w *JobWork) hold(tenant, id string, step int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.runs(jobStep{tenant, id, step}).hold = make(chan struct{})
}

// release lets held executions of the step, and later ones, return.
func (w *JobWork) release(tenant, id string, step int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.runs(jobStep{tenant, id, step})
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

// stats returns a copy of the step's counts.
func (w *JobWork) stats(tenant, id string, step int) jobStepRuns {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := *w.runs(jobStep{tenant, id, step})
	r.hold = nil
	return r
}

func jobOutput(tenant, id string, step int) string {
	return fmt.Sprintf("output of step %d of job %s of %s", step, id, tenant)
}

// RunJobs runs, against a real NATS server and a real Postgres, the
// scenarios every consumer that runs leased jobs passes. Each copy reaches
// the database through a TCP proxy of its own, so a kill cuts its
// connections before anything else (its lease is never released) and an
// outage can hit one copy or all of them.
//
//   - A job killed mid-step resumes on another copy once its lease expired,
//     without running its recorded steps again.
//   - A cancellation stops a running job within seconds; its later steps
//     never run.
//   - A copy alone cut off from the database loses its job to another copy
//     once the lease expired (the takeover is charged, as a crash is), and
//     writes nothing when it comes back.
//   - Two database outages for every copy, each longer than the lease, are
//     outlasted with no attempt spent (MaxAttempts 1).
//   - In every case exactly one result ends the job on the stream, with the
//     right content (the outputs of its steps, or the cancellation's
//     reason), and the outbox is left empty.
func RunJobs(t *testing.T, a JobAdapter) {
	t.Run("KilledMidStepResumesOnAnotherCopy", func(t *testing.T) { jobKilledMidStep(t, a) })
	t.Run("CancelStopsARunningJob", func(t *testing.T) { jobCancelled(t, a) })
	t.Run("TakeoverAfterLeaseExpiry", func(t *testing.T) { jobTakeover(t, a) })
	t.Run("OutageLongerThanTheLeaseSpendsNoAttempt", func(t *testing.T) { jobOutage(t, a) })
}

// jobLease is the scenarios' lease: short, so takeovers and outages longer
// than it take seconds, and long enough that a renewal outside the
// outages is not late on a loaded machine (the database answering one
// in more than 2s, a lease of 2s expired and step 1 ran a third time).
const jobLease = 4 * time.Second

// jobsWorld is one scenario's world.
type jobsWorld struct {
	a      JobAdapter
	env    JobEnv // for Submit and Cancel: the database itself
	dbURL  string
	tenant string
	copies []*jobCopy
	seen   *jobSeen
}

// jobCopy is a running copy and its proxy.
type jobCopy struct {
	c     Copy
	proxy *testenv.Proxy
	isCut bool // the proxy is down
	done  bool // stopped or killed
}

// cut takes the copy's database away: every connection cut, new ones
// refused.
func (c *jobCopy) cut() {
	c.proxy.Down()
	c.isCut = true
}

// restore gives the copy its database back.
func (c *jobCopy) restore(t *testing.T) {
	t.Helper()
	if c.isCut {
		c.proxy.Up(t)
		c.isCut = false
	}
}

func newJobsWorld(t *testing.T, a JobAdapter, maxAttempts int) *jobsWorld {
	t.Helper()
	n := testenv.StartNATS(t)
	dbURL := testenv.DatabaseURL(t)
	cfg := testenv.Config(t, n.URL)
	cfg.BatchSize = 10
	cfg.AckWait = 5 * time.Second
	cfg.ShutdownGrace = time.Second
	cfg.MaxDeliver = 5
	// Results a copy committed but did not send are the relay's: publish
	// them within a second or two.
	cfg.RelayInterval = 200 * time.Millisecond
	cfg.RelayMinAge = time.Second
	w := &jobsWorld{
		a: a,
		env: JobEnv{
			NATS:   n,
			Config: cfg,
			Pool:   testenv.Pool(t),
			Options: job.Options{
				Lease:       jobLease,
				Heartbeat:   200 * time.Millisecond,
				Poll:        100 * time.Millisecond,
				Grace:       time.Second,
				MaxAttempts: maxAttempts,
				Backoff:     []time.Duration{100 * time.Millisecond},
			},
			Work: &JobWork{},
		},
		dbURL:  dbURL,
		tenant: testenv.Tenant(t),
	}
	w.seen = w.subscribe(t)
	return w
}

// start runs a copy behind a proxy of its own.
func (w *jobsWorld) start(t *testing.T) *jobCopy {
	t.Helper()
	p := testenv.StartProxy(t, jobsHostPort(t, w.dbURL))
	env := w.env
	env.Config.DatabaseURL = p.RewriteURL(t, w.dbURL)
	c := &jobCopy{c: w.a.Start(t, env), proxy: p}
	w.copies = append(w.copies, c)
	t.Cleanup(func() {
		if !c.done {
			c.restore(t) // a copy cut off stops as fast as one that is not
			c.c.Stop()
		}
	})
	return c
}

// kill stops a copy as kill -9 would: its database connections are cut
// first, so it can neither release its lease nor record anything, and stay
// cut.
func (w *jobsWorld) kill(c *jobCopy) {
	c.cut()
	c.c.Kill()
	c.done = true
}

func (w *jobsWorld) submit(t *testing.T, id string, steps int) {
	t.Helper()
	w.a.Submit(t, w.env, w.tenant, id, steps)
}

func (w *jobsWorld) status(t *testing.T, id string) job.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := job.Get(ctx, w.env.Pool, job.Key{Tenant: w.tenant, Consumer: w.a.Consumer, ID: id})
	require.NoError(t, err)
	return s
}

// waitStarted waits until step of job id has begun n executions.
func (w *jobsWorld) waitStarted(t *testing.T, id string, step, n int, why string) {
	t.Helper()
	jobsEventually(t, func() bool { return w.env.Work.stats(w.tenant, id, step).started >= n }, func() string {
		s := w.status(t, id)
		return fmt.Sprintf("%s: step %d of job %s began %d executions, want %d; the job is %s after %d attempts (%s)",
			why, step, id, w.env.Work.stats(w.tenant, id, step).started, n, s.State, s.Attempts, s.Error)
	})
}

// outage cuts every copy off the database until job id's lease has been
// expired, by the database's clock, for a second: an outage longer than
// the lease.
func (w *jobsWorld) outage(t *testing.T, id string) {
	t.Helper()
	for _, c := range w.copies {
		if !c.done {
			c.cut()
		}
	}
	jobsEventually(t, func() bool { return w.status(t, id).LeaseLeft < -time.Second }, func() string {
		return fmt.Sprintf("job %s's lease never expired during the outage: %+v", id, w.status(t, id))
	})
	for _, c := range w.copies {
		if !c.done {
			c.restore(t)
		}
	}
}

// jobSeen records the results that end jobs as they arrive.
type jobSeen struct {
	mu  sync.Mutex
	got map[string][]jobArrival
}

type jobArrival struct {
	at time.Time
	r  JobResult
}

func (w *jobsWorld) subscribe(t *testing.T) *jobSeen {
	t.Helper()
	s := &jobSeen{got: map[string][]jobArrival{}}
	nc := w.env.NATS.NC
	for _, subj := range w.a.ResultSubjects {
		sub, err := nc.Subscribe(strings.TrimSuffix(subj, "*")+w.tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err != nil {
				return
			}
			if r, ok := w.a.Result(ev); ok {
				s.mu.Lock()
				s.got[r.ID] = append(s.got[r.ID], jobArrival{time.Now(), r})
				s.mu.Unlock()
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return s
}

// waitResult waits for the first result that ends job id and returns when
// it arrived.
func (w *jobsWorld) waitResult(t *testing.T, id string) (JobResult, time.Time) {
	t.Helper()
	var first jobArrival
	jobsEventually(t, func() bool {
		w.seen.mu.Lock()
		defer w.seen.mu.Unlock()
		if len(w.seen.got[id]) == 0 {
			return false
		}
		first = w.seen.got[id][0]
		return true
	}, func() string {
		s := w.status(t, id)
		return fmt.Sprintf("no result ended job %s; it is %s after %d attempts (%s)", id, s.State, s.Attempts, s.Error)
	})
	return first.r, first.at
}

// finish stops every copy once the outbox holds nothing more of the
// tenant's (the last copy's relay publishes what the others left), then
// requires exactly one result ending each job in the stream, as wanted.
func (w *jobsWorld) finish(t *testing.T, want map[string]JobResult) {
	t.Helper()
	var live []*jobCopy
	for _, c := range w.copies {
		if !c.done {
			live = append(live, c)
		}
	}
	require.NotEmpty(t, live, "a copy must be left to relay the outbox")
	for _, c := range live {
		c.restore(t)
	}
	for _, c := range live[:len(live)-1] {
		c.c.Stop()
		c.done = true
	}
	jobsEventually(t, func() bool { return w.outbox(t) == 0 }, func() string {
		return fmt.Sprintf("%d results of %s left in the outbox", w.outbox(t), w.tenant)
	})
	last := live[len(live)-1]
	last.c.Stop()
	last.done = true
	require.Zero(t, w.outbox(t), "nothing committed after the last copy stopped")

	got := w.streamResults(t)
	for id, r := range want {
		require.Len(t, got[id], 1, "exactly one result ends job %s in the stream: %+v", id, got[id])
		g := got[id][0]
		require.Equal(t, id, g.ID)
		require.Equal(t, r.State, g.State, "job %s: %s", id, g.Reason)
		if r.Reason != "" {
			require.Contains(t, g.Reason, r.Reason, "job %s", id)
		}
		require.Equal(t, r.Content, g.Content, "job %s", id)
	}
	for id := range got {
		_, ok := want[id]
		require.True(t, ok, "a result ended job %s, which was never submitted", id)
	}
}

func (w *jobsWorld) outbox(t *testing.T) int {
	t.Helper()
	var n int
	err := w.env.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE tenant_id = $1`, w.tenant).Scan(&n)
	require.NoError(t, err)
	return n
}

// streamResults reads every message on the tenant's result subjects from
// stream AGENTQ — republished copies included — and returns those that end
// a job, by job id.
func (w *jobsWorld) streamResults(t *testing.T) map[string][]JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filter := make([]string, len(w.a.ResultSubjects))
	for i, s := range w.a.ResultSubjects {
		filter[i] = strings.TrimSuffix(s, "*") + w.tenant
	}
	cons, err := w.env.NATS.JS.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: filter})
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	out := map[string][]JobResult{}
	for pending := info.NumPending; pending > 0; {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		meta, err := m.Metadata()
		require.NoError(t, err)
		pending = meta.NumPending
		ev, err := bus.Decode(m.Headers(), m.Data())
		require.NoError(t, err, "a result in the stream does not decode")
		if r, ok := w.a.Result(ev); ok {
			out[r.ID] = append(out[r.ID], r)
		}
	}
	return out
}

// expected is the result of a job of steps steps that succeeded.
func (w *jobsWorld) expected(id string, steps int) JobResult {
	outs := make([]string, steps)
	for i := range outs {
		outs[i] = jobOutput(w.tenant, id, i)
	}
	return JobResult{ID: id, State: job.Succeeded, Content: w.a.Expected(w.tenant, id, outs)}
}

// requireRuns checks how often each step of job id began.
func (w *jobsWorld) requireRuns(t *testing.T, id string, want ...int) {
	t.Helper()
	got := make([]int, len(want))
	for i := range want {
		got[i] = w.env.Work.stats(w.tenant, id, i).started
	}
	require.Equal(t, want, got, "executions begun of each step of job %s", id)
}

// jobKilledMidStep: copy a is killed in the middle of step 2 of 4, its
// connections cut first; copy b takes the job over once a's lease expired,
// runs steps 2 and 3 (0 and 1 are recorded), and completes it.
func jobKilledMidStep(t *testing.T, a JobAdapter) {
	w := newJobsWorld(t, a, 2)
	const id, steps = "job-killed", 4
	w.env.Work.hold(w.tenant, id, 2)
	ca := w.start(t)
	w.submit(t, id, steps)
	w.waitStarted(t, id, 2, 1, "copy a reaches step 2")
	w.start(t)
	killed := time.Now()
	w.kill(ca)
	w.waitStarted(t, id, 2, 2, "copy b takes the job over")
	t.Logf("taken over %s after the kill (lease %s)", time.Since(killed).Round(time.Millisecond), jobLease)
	w.env.Work.release(w.tenant, id, 2)
	w.waitResult(t, id)

	s := w.status(t, id)
	require.Equal(t, job.Succeeded, s.State, s.Error)
	require.Equal(t, 2, s.Attempts, "the crash is charged")
	w.requireRuns(t, id, 1, 1, 2, 1)
	w.finish(t, map[string]JobResult{id: w.expected(id, steps)})
}

// jobCancelled: a job is cancelled while its step 1 of 4 runs; the step is
// interrupted within seconds, steps 2 and 3 never run, and the job ends
// cancelled with the reason.
func jobCancelled(t *testing.T, a JobAdapter) {
	w := newJobsWorld(t, a, 3)
	const id, steps = "job-cancelled", 4
	const reason = "conformance: cancelled by the operator"
	w.env.Work.hold(w.tenant, id, 1)
	w.start(t)
	w.start(t)
	w.submit(t, id, steps)
	w.waitStarted(t, id, 1, 1, "the job reaches step 1")
	asked := time.Now()
	w.a.Cancel(t, w.env, w.tenant, id, reason)
	jobsEventually(t, func() bool { return w.env.Work.stats(w.tenant, id, 1).interrupted > 0 }, func() string {
		return fmt.Sprintf("the running step was never interrupted; the job is %s", w.status(t, id).State)
	})
	stopped := w.env.Work.stats(w.tenant, id, 1).interruptedAt.Sub(asked)
	_, at := w.waitResult(t, id)
	// The step is held until released and never is: only the cancellation
	// can have interrupted it. How soon is measured, not asserted (it is a
	// heartbeat away, but a loaded machine delays heartbeats).
	t.Logf("step interrupted %s and result published %s after the cancel", stopped.Round(time.Millisecond), at.Sub(asked).Round(time.Millisecond))

	s := w.status(t, id)
	require.Equal(t, job.Cancelled, s.State, s.Error)
	w.requireRuns(t, id, 1, 1, 0, 0)
	w.finish(t, map[string]JobResult{id: {ID: id, State: job.Cancelled, Reason: reason}})
}

// jobTakeover: copy a, running step 1 of 3, alone loses the database; copy
// b takes the job over once a's lease expired. a comes back while b runs
// the step, and finds it has nothing to write: one result, from b.
func jobTakeover(t *testing.T, a JobAdapter) {
	w := newJobsWorld(t, a, 2)
	const id, steps = "job-taken-over", 3
	w.env.Work.hold(w.tenant, id, 1)
	ca := w.start(t)
	w.submit(t, id, steps)
	w.waitStarted(t, id, 1, 1, "copy a reaches step 1")
	w.start(t)
	ca.cut()
	cut := time.Now()
	w.waitStarted(t, id, 1, 2, "copy b takes the job over")
	t.Logf("taken over %s after copy a was cut off (lease %s)", time.Since(cut).Round(time.Millisecond), jobLease)
	ca.restore(t)
	w.env.Work.release(w.tenant, id, 1)
	w.waitResult(t, id)

	s := w.status(t, id)
	require.Equal(t, job.Succeeded, s.State, s.Error)
	require.Equal(t, 2, s.Attempts, "a takeover is charged, as a crash is")
	w.requireRuns(t, id, 1, 2, 1)
	w.finish(t, map[string]JobResult{id: w.expected(id, steps)})
}

// jobOutage: the database goes away for both copies twice, each time for
// longer than the lease, while steps 1 and then 2 of 4 run; with
// MaxAttempts 1, any attempt spent would fail the job.
func jobOutage(t *testing.T, a JobAdapter) {
	w := newJobsWorld(t, a, 1)
	const id, steps = "job-outage", 4
	w.env.Work.hold(w.tenant, id, 1)
	w.env.Work.hold(w.tenant, id, 2)
	w.start(t)
	w.submit(t, id, steps)
	w.waitStarted(t, id, 1, 1, "the job reaches step 1")
	w.start(t)

	w.outage(t, id)
	w.waitStarted(t, id, 1, 2, "the job resumes after the first outage")
	w.env.Work.release(w.tenant, id, 1)
	w.waitStarted(t, id, 2, 1, "the job reaches step 2")
	w.outage(t, id)
	w.waitStarted(t, id, 2, 2, "the job resumes after the second outage")
	w.env.Work.release(w.tenant, id, 2)
	w.waitResult(t, id)

	s := w.status(t, id)
	require.Equal(t, job.Succeeded, s.State, s.Error)
	require.Equal(t, 1, s.Attempts, "outages spend no attempt")
	w.requireRuns(t, id, 1, 2, 2, 1)
	w.finish(t, map[string]JobResult{id: w.expected(id, steps)})
}

// jobsEventually polls cond every 50 ms for a minute, then fails with
// msg(), evaluated then.
func jobsEventually(t *testing.T, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", msg())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jobsHostPort is the database server's address in dbURL.
func jobsHostPort(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}
