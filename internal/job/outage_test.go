package job_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
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

// TestOutageLongerThanLease: the database goes away twice, each time for
// longer than the lease, while a job with MaxAttempts 2 runs on a worker
// that reaches it only through a proxy. Neither outage spends an attempt:
// the job succeeds with one attempt charged, its recorded steps never run
// again (only the step in flight at each outage does), and exactly one
// outcome commits.
func TestOutageLongerThanLease(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	url := testenv.DatabaseURL(t)
	proxy := testenv.StartProxy(t, dbHostPort(t, url))
	pool, err := database.Open(h.ctx(), proxy.RewriteURL(t, url))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	type arrival struct {
		step    string
		attempt int
	}
	arrived := make(chan arrival, 16)
	proceed := make(chan struct{}, 16)
	causes := make(chan error, 16)
	steps := newCounter()
	handler := func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		var outs []json.RawMessage
		for _, name := range []string{"a", "b", "c"} {
			out, err := j.Step(ctx, name, func(ctx context.Context) (json.RawMessage, error) {
				steps.inc(name)
				arrived <- arrival{name, j.Attempt}
				select {
				case <-proceed:
				case <-ctx.Done():
					causes <- context.Cause(ctx)
					return nil, context.Cause(ctx)
				}
				return json.RawMessage(`{"step":"` + name + `"}`), nil
			})
			if err != nil {
				return nil, err
			}
			outs = append(outs, out)
		}
		return json.Marshal(outs)
	}
	reg := prometheus.NewRegistry()
	opts := h.options("w")
	opts.Lease, opts.Heartbeat, opts.MaxAttempts = 2*time.Second, 100*time.Millisecond, 2
	opts.Metrics = job.NewMetrics(reg)
	r := h.start(pool, opts, handler)

	await := func(step string) arrival {
		t.Helper()
		select {
		case a := <-arrived:
			require.Equal(t, step, a.step)
			return a
		case <-time.After(30 * time.Second):
			s := h.status("exp-1")
			t.Fatalf("step %s never ran again: job %s after %d attempts (%s)", step, s.State, s.Attempts, s.Error)
			return arrival{}
		}
	}
	// outage cuts the worker off until its lease has been expired, by the
	// database's clock, for a whole second, and its handler was told to stop.
	outage := func() {
		t.Helper()
		proxy.Down()
		testenv.Eventually(t, 30*time.Second, func() bool { return h.status("exp-1").LeaseLeft < -time.Second },
			"the lease never expired during the outage")
		select {
		case c := <-causes:
			require.ErrorIs(t, c, job.ErrLeaseLost, "the handler learns its lease may be gone")
		case <-time.After(10 * time.Second):
			t.Fatal("the handler was not told to stop during the outage")
		}
		proxy.Up(t)
	}

	require.Equal(t, 1, await("a").attempt)
	proceed <- struct{}{}
	require.Equal(t, 1, await("b").attempt)
	outage()
	require.Equal(t, 1, await("b").attempt, "the outage spent no attempt")
	proceed <- struct{}{}
	require.Equal(t, 1, await("c").attempt)
	outage()
	require.Equal(t, 1, await("c").attempt, "the second outage spent no attempt")
	proceed <- struct{}{}
	testenv.Eventually(t, 30*time.Second, func() bool { return h.state("exp-1").Terminal() }, "job never finished")
	require.NoError(t, r.stop())

	s := h.status("exp-1")
	require.Equal(t, job.Succeeded, s.State, s.Error)
	require.Equal(t, 1, s.Attempts)
	require.JSONEq(t, `[{"step":"a"},{"step":"b"},{"step":"c"}]`, string(s.Result))
	require.Equal(t, 1, steps.get("a"), "a recorded step never runs again")
	require.Equal(t, 2, steps.get("b"), "b was in flight at the first outage")
	require.Equal(t, 2, steps.get("c"), "c was in flight at the second outage")
	require.Equal(t, []string{"succeeded"}, h.committedDone("exp-1"))
	require.Len(t, h.doneCalls("exp-1"), 1)
	got := counters(t, reg, h.consumer)
	require.Equal(t, 3.0, got["leased"], "%v", got)
	require.Equal(t, 2.0, got["released,outage"], "%v", got)
	require.Equal(t, 0.0, got["lease_lost"], "%v", got)
	require.Equal(t, 1.0, got["finished,succeeded"], "%v", got)

	rows, err := h.pool.Query(h.ctx(), `SELECT step, attempt FROM job_steps WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 AND step NOT LIKE 'done:%' ORDER BY step`,
		h.tenant, h.consumer, "exp-1")
	require.NoError(t, err)
	type rec struct {
		Step    string
		Attempt int
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	require.NoError(t, err)
	require.Equal(t, []rec{{"a", 1}, {"b", 1}, {"c", 1}}, recs)
}

// dbHostPort is the database server's address in url.
func dbHostPort(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// TestOutageDuringStepRecord: an outage shorter than the lease that makes
// a step's recording fail spends no attempt either. The handler returns
// Step's error; the worker waits for the database to settle the attempt
// and gives it back, and the step runs again on the next lease.
func TestOutageDuringStepRecord(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	url := testenv.DatabaseURL(t)
	proxy := testenv.StartProxy(t, dbHostPort(t, url))
	pool, err := database.Open(h.ctx(), proxy.RewriteURL(t, url))
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	inStep := make(chan struct{}, 4)
	finish := make(chan struct{}, 4)
	returned := make(chan error, 4)
	attempts := make(chan int, 4)
	steps := newCounter()
	opts := h.options("w")
	opts.Lease, opts.Heartbeat, opts.MaxAttempts = 10*time.Second, 100*time.Millisecond, 1
	h.start(pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		attempts <- j.Attempt
		out, err := j.Step(ctx, "a", func(ctx context.Context) (json.RawMessage, error) {
			steps.inc("a")
			inStep <- struct{}{}
			<-finish
			return json.RawMessage(`{"step":"a"}`), nil
		})
		returned <- err
		return out, err
	})
	<-inStep
	proxy.Down()
	finish <- struct{}{} // the output is ready while the database is away
	var stepErr error
	select {
	case stepErr = <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never returned")
	}
	require.Error(t, stepErr)
	require.True(t, bus.IsUnavailable(stepErr), "an unreachable database is an outage: %v", stepErr)
	proxy.Up(t)
	<-inStep
	finish <- struct{}{}
	testenv.Eventually(t, 30*time.Second, func() bool { return h.state("exp-1").Terminal() }, "job never finished")

	s := h.status("exp-1")
	require.Equal(t, job.Succeeded, s.State, s.Error)
	require.Equal(t, 1, s.Attempts)
	require.Equal(t, []int{1, 1}, []int{<-attempts, <-attempts})
	require.Equal(t, 2, steps.get("a"))
	require.Equal(t, []string{"succeeded"}, h.committedDone("exp-1"))
}
