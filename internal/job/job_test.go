package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/testenv"
)

func TestEnqueue(t *testing.T) {
	h := newHarness(t)
	ctx := h.ctx()

	t.Run("twice in two transactions is one job", func(t *testing.T) {
		require.True(t, h.enqueue("exp-1", "experiment", `{"prompt_id":"p1","repetitions":3}`))
		// A redelivered request: same payload, key order and spacing aside.
		require.False(t, h.enqueue("exp-1", "experiment", `{"repetitions": 3, "prompt_id": "p1"}`))
		s := h.status("exp-1")
		require.Equal(t, job.Queued, s.State)
		require.Equal(t, "experiment", s.Kind)
		require.JSONEq(t, `{"prompt_id":"p1","repetitions":3}`, string(s.Payload))
		require.Equal(t, 0, s.Attempts)
		var n int
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE tenant_id = $1 AND consumer = $2`, h.tenant, h.consumer).Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("rolled back with its transaction", func(t *testing.T) {
		tx, err := h.pool.Begin(ctx)
		require.NoError(t, err)
		created, err := job.Enqueue(ctx, tx, job.New{Key: h.key("exp-rolled-back"), Kind: "experiment"})
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, err)
		require.True(t, created)
		_, err = job.Get(ctx, h.pool, h.key("exp-rolled-back"))
		require.ErrorIs(t, err, job.ErrNotFound)
		require.True(t, h.enqueue("exp-rolled-back", "experiment", ""), "the id is free again")
		require.JSONEq(t, `null`, string(h.status("exp-rolled-back").Payload))
	})

	t.Run("the same id with another request is a permanent conflict", func(t *testing.T) {
		for _, n := range []job.New{
			{Key: h.key("exp-1"), Kind: "experiment", Payload: json.RawMessage(`{"prompt_id":"p2"}`)},
			{Key: h.key("exp-1"), Kind: "candidates", Payload: json.RawMessage(`{"prompt_id":"p1","repetitions":3}`)},
		} {
			created, err := job.Enqueue(ctx, h.pool, n)
			require.ErrorIs(t, err, job.ErrConflict)
			require.True(t, bus.IsPermanent(err))
			require.False(t, created)
		}
		require.JSONEq(t, `{"prompt_id":"p1","repetitions":3}`, string(h.status("exp-1").Payload), "the first request stays")
	})

	t.Run("the same id under another tenant or consumer is another job", func(t *testing.T) {
		for _, k := range []job.Key{
			{Tenant: h.tenant + "x", Consumer: h.consumer, ID: "exp-1"},
			{Tenant: h.tenant, Consumer: h.consumer + "x", ID: "exp-1"},
		} {
			created, err := job.Enqueue(ctx, h.pool, job.New{Key: k, Kind: "experiment"})
			require.NoError(t, err)
			require.True(t, created, "%+v", k)
		}
	})

	t.Run("bad requests are permanent errors", func(t *testing.T) {
		for _, n := range []job.New{
			{Key: job.Key{Consumer: h.consumer, ID: "x"}, Kind: "experiment"},
			{Key: job.Key{Tenant: h.tenant, ID: "x"}, Kind: "experiment"},
			{Key: job.Key{Tenant: h.tenant, Consumer: h.consumer}, Kind: "experiment"},
			{Key: h.key("x"), Kind: ""},
			{Key: h.key("x"), Kind: "experiment", Payload: json.RawMessage(`{"unterminated"`)},
		} {
			_, err := job.Enqueue(ctx, h.pool, n)
			require.Error(t, err, "%+v", n)
			require.True(t, bus.IsPermanent(err), "%v", err)
		}
		_, err := job.Get(ctx, h.pool, h.key("x"))
		require.ErrorIs(t, err, job.ErrNotFound)
	})
}

// TestWorkersRunEachJobOnce runs 20 jobs on two workers of three slots
// each: every job succeeds, its handler ran exactly once, and never on two
// workers at the same time.
func TestWorkersRunEachJobOnce(t *testing.T) {
	h := newHarness(t)
	const jobs = 20
	for i := range jobs {
		h.enqueue(fmt.Sprintf("exp-%02d", i), "experiment", fmt.Sprintf(`{"n":%d}`, i))
	}

	var mu sync.Mutex
	inFlight := map[string]string{} // job id → owner running it
	var overlaps []string
	runs := newCounter()
	byOwner := newCounter()
	handler := func(owner string) job.Handler {
		return func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			mu.Lock()
			if other, ok := inFlight[j.ID]; ok {
				overlaps = append(overlaps, fmt.Sprintf("%s on %s and %s", j.ID, other, owner))
			}
			inFlight[j.ID] = owner
			mu.Unlock()
			defer func() {
				mu.Lock()
				delete(inFlight, j.ID)
				mu.Unlock()
			}()
			runs.inc(j.ID)
			byOwner.inc(owner)
			var in struct{ N int }
			if err := json.Unmarshal(j.Payload, &in); err != nil {
				return nil, bus.Permanent(err)
			}
			// A few heartbeats' worth of work, so a double lease would overlap.
			out, err := job.StepJSON(ctx, j, "trial", func(ctx context.Context) (int, error) {
				select {
				case <-time.After(time.Duration(50+10*(in.N%5)) * time.Millisecond):
				case <-ctx.Done():
					return 0, context.Cause(ctx)
				}
				return in.N * in.N, nil
			})
			if err != nil {
				return nil, err
			}
			return json.RawMessage(fmt.Sprintf(`{"square":%d}`, out)), nil
		}
	}
	reg := prometheus.NewRegistry()
	metrics := job.NewMetrics(reg)
	for _, owner := range []string{"w1", "w2"} {
		opts := h.options(owner)
		opts.Metrics = metrics
		opts.Concurrency = 3
		opts.Lease = time.Second
		opts.Heartbeat = 100 * time.Millisecond
		h.start(h.pool, opts, handler(owner))
	}

	testenv.Eventually(t, time.Minute, func() bool {
		var done int
		require.NoError(t, h.pool.QueryRow(h.ctx(), `SELECT count(*) FROM jobs WHERE tenant_id = $1 AND consumer = $2 AND state = 'succeeded'`,
			h.tenant, h.consumer).Scan(&done))
		return done == jobs
	}, "not every job succeeded")

	mu.Lock()
	require.Empty(t, overlaps)
	mu.Unlock()
	for i := range jobs {
		id := fmt.Sprintf("exp-%02d", i)
		s := h.status(id)
		require.Equal(t, job.Succeeded, s.State, id)
		require.Equal(t, 1, s.Attempts, id)
		require.JSONEq(t, fmt.Sprintf(`{"square":%d}`, i*i), string(s.Result), id)
		require.Empty(t, s.Error, id)
		require.Equal(t, 1, runs.get(id), id)
		require.Equal(t, []string{"succeeded"}, h.committedDone(id), id)
		calls := h.doneCalls(id)
		require.Len(t, calls, 1, id)
		require.Equal(t, job.Succeeded, calls[0].State)
		require.NoError(t, calls[0].Err)
		require.JSONEq(t, fmt.Sprintf(`{"square":%d}`, i*i), string(calls[0].Result))
	}
	require.Equal(t, jobs, byOwner.get("w1")+byOwner.get("w2"))
	require.Equal(t, map[string]float64{
		"leased":             jobs,
		"finished,cancelled": 0, "finished,failed": 0, "finished,succeeded": jobs,
		"lease_lost":     0,
		"released,error": 0, "released,outage": 0, "released,stop": 0, "released,store": 0,
	}, counters(t, reg, h.consumer))
	require.Positive(t, byOwner.get("w1"), "w1 ran no job")
	require.Positive(t, byOwner.get("w2"), "w2 ran no job")
}

// TestCrashResume: a worker records steps a and b, then loses the database
// for good (its pool is closed: no heartbeat, no release, as in a crash).
// Once its lease expires another worker takes the job over, finds a and b
// done, runs c, and the job succeeds on attempt 2.
func TestCrashResume(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	steps := newCounter()
	reachedB := make(chan struct{})
	var crashCause error
	crashed := make(chan struct{})
	handler := func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		var outs []json.RawMessage
		for _, name := range []string{"a", "b"} {
			out, err := j.Step(ctx, name, func(context.Context) (json.RawMessage, error) {
				steps.inc(name)
				return json.RawMessage(`{"step":"` + name + `"}`), nil
			})
			if err != nil {
				return nil, err
			}
			outs = append(outs, out)
		}
		if j.Attempt == 1 {
			close(reachedB)
			<-ctx.Done()
			crashCause = context.Cause(ctx)
			close(crashed)
			return nil, crashCause
		}
		out, err := j.Step(ctx, "c", func(context.Context) (json.RawMessage, error) {
			steps.inc("c")
			return json.RawMessage(`{"step":"c"}`), nil
		})
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
		return json.Marshal(outs)
	}

	const lease = 500 * time.Millisecond
	ctx := h.ctx()
	crashPool, err := database.Open(ctx, testenv.DatabaseURL(t))
	require.NoError(t, err)
	optsA := h.options("a")
	optsA.Lease, optsA.Heartbeat = lease, 100*time.Millisecond
	a := h.start(crashPool, optsA, handler)
	select {
	case <-reachedB:
	case <-ctx.Done():
		t.Fatal("worker a never reached step b")
	}
	crashPool.Close()
	crashedAt := time.Now()

	// The crashed worker's handler is told its lease is lost once it can no
	// longer have been renewed.
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatal("the crashed worker's handler was never cancelled")
	}
	require.ErrorIs(t, crashCause, job.ErrLeaseLost)
	require.Equal(t, job.Running, h.state("exp-1"), "nobody may write for the crashed worker")

	optsB := h.options("b")
	optsB.Lease, optsB.Heartbeat = lease, 100*time.Millisecond
	h.start(h.pool, optsB, handler)
	testenv.Eventually(t, 30*time.Second, func() bool { return h.state("exp-1") == job.Succeeded }, "job not taken over")
	t.Logf("takeover and completion %s after the crash (lease %s)", time.Since(crashedAt).Round(time.Millisecond), lease)

	s := h.status("exp-1")
	require.Equal(t, 2, s.Attempts)
	require.JSONEq(t, `[{"step":"a"},{"step":"b"},{"step":"c"}]`, string(s.Result))
	for _, name := range []string{"a", "b", "c"} {
		require.Equal(t, 1, steps.get(name), "step %s runs", name)
	}
	require.Equal(t, []string{"succeeded"}, h.committedDone("exp-1"))
	require.Len(t, h.doneCalls("exp-1"), 1)
	require.NoError(t, a.stop(), "the crashed worker still stops cleanly")
}

// TestCancel covers RequestCancel on a running, a queued, a finished and an
// unknown job.
func TestCancel(t *testing.T) {
	t.Run("running: the handler's context is cancelled with the reason within a heartbeat", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		started := make(chan struct{})
		type seen struct {
			cause error
			at    time.Time
		}
		got := make(chan seen, 1)
		calls := newCounter()
		opts := h.options("w")
		opts.Heartbeat = 100 * time.Millisecond
		h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			calls.inc(j.ID)
			close(started)
			<-ctx.Done()
			got <- seen{context.Cause(ctx), time.Now()}
			return nil, ctx.Err()
		})
		<-started

		var st job.State
		h.inTx(func(tx pgx.Tx) error {
			var err error
			st, err = job.RequestCancel(h.ctx(), tx, h.key("exp-1"), "operator: wrong model")
			return err
		})
		committed := time.Now()
		require.Equal(t, job.Running, st)

		var s seen
		select {
		case s = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("handler not cancelled")
		}
		latency := s.at.Sub(committed)
		t.Logf("cancel reached the handler after %s (heartbeat %s)", latency.Round(time.Millisecond), opts.Heartbeat)
		// One heartbeat interval plus the heartbeat's own statement.
		require.Less(t, latency, opts.Heartbeat+time.Second)
		require.ErrorIs(t, s.cause, job.ErrCancelled)
		var ce *job.CancelledError
		require.ErrorAs(t, s.cause, &ce)
		require.Equal(t, "operator: wrong model", ce.Reason)

		testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Cancelled }, "job not cancelled")
		st2 := h.status("exp-1")
		require.True(t, st2.CancelRequested)
		require.Equal(t, "operator: wrong model", st2.CancelReason)
		require.Equal(t, "job cancelled: operator: wrong model", st2.Error)
		require.Nil(t, st2.Result)
		require.Equal(t, []string{"cancelled"}, h.committedDone("exp-1"))
		done := h.doneCalls("exp-1")
		require.Len(t, done, 1)
		require.Equal(t, job.Cancelled, done[0].State)
		require.ErrorAs(t, done[0].Err, &ce)
		require.Equal(t, "operator: wrong model", ce.Reason)
		require.Equal(t, 1, calls.get("exp-1"))
	})

	t.Run("queued: finished as cancelled without running", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		st, err := job.RequestCancel(h.ctx(), h.pool, h.key("exp-1"), "changed my mind")
		require.NoError(t, err)
		require.Equal(t, job.Queued, st)
		_, err = job.RequestCancel(h.ctx(), h.pool, h.key("exp-1"), "second thoughts")
		require.NoError(t, err)
		calls := newCounter()
		h.start(h.pool, h.options("w"), func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			calls.inc(j.ID)
			return nil, nil
		})
		testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Cancelled }, "job not cancelled")
		require.Equal(t, 0, calls.get("exp-1"))
		require.Equal(t, "changed my mind", h.status("exp-1").CancelReason, "the first reason stays")
		require.Equal(t, []string{"cancelled"}, h.committedDone("exp-1"))
		require.Len(t, h.doneCalls("exp-1"), 1)
	})

	t.Run("queued in a retry's backoff: cancelled at once", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		opts := h.options("w")
		opts.Backoff = []time.Duration{time.Hour}
		calls := newCounter()
		h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			calls.inc(j.ID)
			return nil, errors.New("llm timeout")
		})
		testenv.Eventually(t, 10*time.Second, func() bool {
			s := h.status("exp-1")
			return s.State == job.Queued && s.Attempts == 1
		}, "job not released for a retry")
		_, err := job.RequestCancel(h.ctx(), h.pool, h.key("exp-1"), "stop")
		require.NoError(t, err)
		testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Cancelled }, "job not cancelled")
		require.Equal(t, 1, calls.get("exp-1"))
		require.Equal(t, []string{"cancelled"}, h.committedDone("exp-1"))
	})

	t.Run("finished: cancelling and enqueueing again (a replay) are no-ops", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		h.start(h.pool, h.options("w"), func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			return json.RawMessage(`{"ok":true}`), nil
		})
		testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Succeeded }, "job not done")
		st, err := job.RequestCancel(h.ctx(), h.pool, h.key("exp-1"), "too late")
		require.NoError(t, err)
		require.Equal(t, job.Succeeded, st)
		s := h.status("exp-1")
		require.Equal(t, job.Succeeded, s.State)
		require.False(t, s.CancelRequested)
		require.Empty(t, s.CancelReason)
		require.JSONEq(t, `{"ok":true}`, string(s.Result))
		require.Len(t, h.doneCalls("exp-1"), 1)

		require.False(t, h.enqueue("exp-1", "experiment", `{}`))
		again := h.status("exp-1")
		require.Equal(t, s, again, "the finished job is untouched, so no worker leases it")
	})

	t.Run("unknown: ErrNotFound", func(t *testing.T) {
		h := newHarness(t)
		_, err := job.RequestCancel(h.ctx(), h.pool, h.key("nope"), "x")
		require.ErrorIs(t, err, job.ErrNotFound)
		require.False(t, bus.IsPermanent(err), "the caller classifies it")
	})
}

// TestOutcomes maps what a handler returns to how the job ends, and checks
// that exactly one terminal outcome (and OnDone) commits.
func TestOutcomes(t *testing.T) {
	errLLM := errors.New("llm timeout")
	tests := []struct {
		name        string
		maxAttempts int
		onDoneFails int                               // OnDone failures to inject
		fn          func(attempt int) (string, error) // the handler's return on each call
		panics      func(attempt int) bool            // the handler panics instead
		want        job.State
		calls       int    // handler calls
		attempts    int    // stored attempts at the end
		errContains string // stored error
		result      string
	}{
		{
			name: "success", maxAttempts: 3,
			fn:   func(int) (string, error) { return `{"score":0.9}`, nil },
			want: job.Succeeded, calls: 1, attempts: 1, result: `{"score":0.9}`,
		},
		{
			name: "nil result", maxAttempts: 3,
			fn:   func(int) (string, error) { return "", nil },
			want: job.Succeeded, calls: 1, attempts: 1,
		},
		{
			name: "permanent error fails at once", maxAttempts: 3,
			fn:   func(int) (string, error) { return "", bus.Permanentf("prompt p1 has no version 7") },
			want: job.Failed, calls: 1, attempts: 1, errContains: "prompt p1 has no version 7",
		},
		{
			name: "transient error retried until MaxAttempts", maxAttempts: 3,
			fn:   func(int) (string, error) { return "", errLLM },
			want: job.Failed, calls: 3, attempts: 3, errContains: "attempt 3 of 3: llm timeout",
		},
		{
			name: "transient error then success", maxAttempts: 3,
			fn: func(a int) (string, error) {
				if a == 1 {
					return "", errLLM
				}
				return `{"ok":true}`, nil
			},
			want: job.Succeeded, calls: 2, attempts: 2, result: `{"ok":true}`,
		},
		{
			name: "outages spend no attempt", maxAttempts: 1,
			fn: func(a int) (string, error) {
				if a <= 3 {
					return "", bus.Unavailable(errors.New("provider down"))
				}
				return `{"ok":true}`, nil
			},
			want: job.Succeeded, calls: 4, attempts: 1, result: `{"ok":true}`,
		},
		{
			name: "panic fails at once", maxAttempts: 3,
			panics: func(int) bool { return true },
			want:   job.Failed, calls: 1, attempts: 1, errContains: "handler panicked: boom",
		},
		{
			name: "invalid JSON result fails", maxAttempts: 3,
			fn:   func(int) (string, error) { return `{"score":`, nil },
			want: job.Failed, calls: 1, attempts: 1, errContains: "handler result: invalid JSON",
		},
		{
			name: "failing OnDone retries the completion, spending no attempt", maxAttempts: 1, onDoneFails: 2,
			fn:   func(int) (string, error) { return `{"ok":true}`, nil },
			want: job.Succeeded, calls: 3, attempts: 1, result: `{"ok":true}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.fail["exp-1"] = tc.onDoneFails
			h.enqueue("exp-1", "experiment", `{}`)
			calls := newCounter()
			steps := newCounter()
			opts := h.options("w")
			opts.MaxAttempts = tc.maxAttempts
			h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
				n := calls.inc(j.ID)
				// A checkpointed step: however often the job runs, it runs once.
				if _, err := j.Step(ctx, "prepare", func(context.Context) (json.RawMessage, error) {
					steps.inc("prepare")
					return nil, nil
				}); err != nil {
					return nil, err
				}
				if tc.panics != nil && tc.panics(n) {
					panic("boom")
				}
				out, err := tc.fn(n)
				if out == "" {
					return nil, err
				}
				return json.RawMessage(out), err
			})
			testenv.Eventually(t, 20*time.Second, func() bool { return h.state("exp-1").Terminal() }, "job never finished")

			s := h.status("exp-1")
			require.Equal(t, tc.want, s.State)
			require.Equal(t, tc.calls, calls.get("exp-1"), "handler calls")
			require.Equal(t, 1, steps.get("prepare"), "step runs")
			require.Equal(t, tc.attempts, s.Attempts, "attempts")
			if tc.errContains == "" {
				require.Empty(t, s.Error)
			} else {
				require.Contains(t, s.Error, tc.errContains)
			}
			if tc.result == "" {
				require.Nil(t, s.Result)
			} else {
				require.JSONEq(t, tc.result, string(s.Result))
			}
			require.Equal(t, []string{string(tc.want)}, h.committedDone("exp-1"), "committed outcomes")
			done := h.doneCalls("exp-1")
			require.Len(t, done, 1+tc.onDoneFails, "OnDone calls")
			last := done[len(done)-1]
			require.Equal(t, tc.want, last.State)
			if tc.want == job.Failed {
				require.Error(t, last.Err)
				require.Contains(t, last.Err.Error(), tc.errContains)
			} else {
				require.NoError(t, last.Err)
			}
		})
	}
}

// TestCrashLoopGivesUp: a job whose every attempt dies without an outcome
// is failed when leased past MaxAttempts, without running again.
func TestCrashLoopGivesUp(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	// Two attempts that ended in a crash: leased, never settled, expired.
	_, err := h.pool.Exec(h.ctx(), `
		UPDATE jobs SET state = 'running', attempts = 2, lease_token = 2, lease_owner = 'dead', lease_until = now() - interval '1 second'
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3`, h.tenant, h.consumer, "exp-1")
	require.NoError(t, err)
	calls := newCounter()
	opts := h.options("w")
	opts.MaxAttempts = 2
	h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		calls.inc(j.ID)
		return nil, nil
	})
	testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Failed }, "job not failed")
	s := h.status("exp-1")
	require.Equal(t, 3, s.Attempts)
	require.Equal(t, "gave up: 2 attempts ended without an outcome", s.Error)
	require.Equal(t, 0, calls.get("exp-1"))
	require.Equal(t, []string{"failed"}, h.committedDone("exp-1"))
}

// TestGracefulStop: a stopping worker lets a handler finish within the
// grace period; past it, it cancels the handler and releases the job, which
// another worker takes at once — long before the lease would have expired.
func TestGracefulStop(t *testing.T) {
	t.Run("a handler that finishes within grace completes", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		started, release := make(chan struct{}), make(chan struct{})
		var ctxErr error
		r := h.start(h.pool, h.options("w"), func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			close(started)
			<-release // still working when the stop begins
			ctxErr = ctx.Err()
			return json.RawMessage(`{"ok":true}`), nil
		})
		<-started
		r.signal()
		close(release) // returns within grace
		require.NoError(t, r.wait())
		require.NoError(t, ctxErr, "the handler was not cancelled")
		require.Equal(t, job.Succeeded, h.state("exp-1"))
		require.Equal(t, 1, h.status("exp-1").Attempts)
	})

	t.Run("past grace the job is released for another worker at once", func(t *testing.T) {
		h := newHarness(t)
		h.enqueue("exp-1", "experiment", `{}`)
		const lease = time.Minute
		started := make(chan struct{})
		var cause error
		optsA := h.options("a")
		optsA.Lease, optsA.Heartbeat, optsA.Grace = lease, time.Second, 200*time.Millisecond
		a := h.start(h.pool, optsA, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil, cause
		})
		<-started
		begin := time.Now()
		require.NoError(t, a.stop())
		t.Logf("worker stopped %s after the signal (grace %s)", time.Since(begin).Round(time.Millisecond), optsA.Grace)
		require.ErrorIs(t, cause, job.ErrStopping)
		s := h.status("exp-1")
		require.Equal(t, job.Queued, s.State)
		require.Equal(t, 0, s.Attempts, "a stop spends no attempt")
		require.Empty(t, s.LeaseOwner)

		attempt := make(chan int, 1)
		optsB := h.options("b")
		optsB.Lease, optsB.Heartbeat = lease, time.Second
		released := time.Now()
		h.start(h.pool, optsB, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
			attempt <- j.Attempt
			return json.RawMessage(`{"by":"b"}`), nil
		})
		testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Succeeded }, "job not taken over")
		t.Logf("taken over and finished %s after the release (lease %s)", time.Since(released).Round(time.Millisecond), lease)
		require.Equal(t, 1, <-attempt)
		require.Equal(t, []string{"succeeded"}, h.committedDone("exp-1"))
		require.Len(t, h.doneCalls("exp-1"), 1)
	})
}

// TestHeartbeatFindsLeaseTaken: when another worker took the lease (here
// by hand, as a takeover does), the heartbeat cancels the handler with
// ErrLeaseLost and the worker writes nothing.
func TestHeartbeatFindsLeaseTaken(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	started := make(chan struct{})
	causes := make(chan error, 1)
	opts := h.options("w")
	opts.Lease, opts.Heartbeat = 10*time.Second, 100*time.Millisecond
	r := h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return json.RawMessage(`{"by":"w"}`), nil // even a success is not recorded
	})
	<-started
	_, err := h.pool.Exec(h.ctx(), `
		UPDATE jobs SET lease_token = lease_token + 1, attempts = attempts + 1, lease_owner = 'thief'
		WHERE tenant_id = $1 AND consumer = $2 AND id = $3`, h.tenant, h.consumer, "exp-1")
	require.NoError(t, err)
	select {
	case c := <-causes:
		require.ErrorIs(t, c, job.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled")
	}
	require.NoError(t, r.stop())
	s := h.status("exp-1")
	require.Equal(t, job.Running, s.State)
	require.Equal(t, "thief", s.LeaseOwner)
	require.Nil(t, s.Result)
	require.Empty(t, h.doneCalls("exp-1"))
}

func TestNewWorkerValidates(t *testing.T) {
	pool := testenv.Pool(t)
	ok := func(context.Context, *job.Job) (json.RawMessage, error) { return nil, nil }
	for _, tc := range []struct {
		name string
		opts job.Options
		h    job.Handler
	}{
		{"no consumer", job.Options{}, ok},
		{"heartbeat not below lease", job.Options{Consumer: "c", Lease: time.Second, Heartbeat: time.Second}, ok},
		{"negative backoff", job.Options{Consumer: "c", Backoff: []time.Duration{-time.Second}}, ok},
		{"nil handler", job.Options{Consumer: "c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := job.NewWorker(pool, tc.opts, tc.h, testenv.Logger(t))
			require.Error(t, err)
		})
	}
}

// TestWake: a worker idle on a long poll leases a new job at once when
// woken.
func TestWake(t *testing.T) {
	h := newHarness(t)
	opts := h.options("w")
	opts.Poll = time.Hour
	w, err := job.NewWorker(h.pool, opts, func(context.Context, *job.Job) (json.RawMessage, error) {
		return json.RawMessage(`{}`), nil
	}, testenv.Logger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	// The first job is found by the lease at start; once it is done the
	// worker waits on its hour-long poll.
	h.enqueue("exp-1", "experiment", `{}`)
	w.Wake()
	testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-1") == job.Succeeded }, "first job not run")
	h.enqueue("exp-2", "experiment", `{}`)
	w.Wake()
	testenv.Eventually(t, 10*time.Second, func() bool { return h.state("exp-2") == job.Succeeded }, "woken worker did not run the new job")
}

// counters reads the worker metrics of consumer from reg, keyed by name
// (without the agentq_jobs_ prefix) and label values.
func counters(t *testing.T, reg *prometheus.Registry, consumer string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		name, ok := strings.CutPrefix(mf.GetName(), "agentq_jobs_")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, "_total")
		for _, m := range mf.GetMetric() {
			key := name
			mine := false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "consumer":
					mine = l.GetValue() == consumer
				default:
					key += "," + l.GetValue()
				}
			}
			if mine {
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestStopGivesUpOnStuckHandler: a handler that ignores its cancellation
// does not hold up Run past a second grace period, and no longer keeps its
// lease alive: the lease expires so another worker can take the job over.
func TestStopGivesUpOnStuckHandler(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	started, unstick := make(chan struct{}), make(chan struct{})
	opts := h.options("w")
	opts.Lease, opts.Heartbeat, opts.Grace = 500*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	r := h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		close(started)
		<-unstick // ignores ctx
		return nil, ctx.Err()
	})
	t.Cleanup(func() { close(unstick) })
	<-started
	require.ErrorContains(t, r.stop(), "1 handlers ignored their cancellation")
	testenv.Eventually(t, 10*time.Second, func() bool {
		var expired bool
		require.NoError(t, h.pool.QueryRow(h.ctx(), `SELECT lease_until <= now() FROM jobs WHERE tenant_id = $1 AND consumer = $2 AND id = $3`,
			h.tenant, h.consumer, "exp-1").Scan(&expired))
		return expired
	}, "the stuck handler's lease is still renewed")
	require.Equal(t, job.Running, h.state("exp-1"))
}
