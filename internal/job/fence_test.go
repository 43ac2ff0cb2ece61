package job

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestFencing drives two workers' leases by hand: w1's lease, expired but
// taken over by nobody, is still w1's; w2, just back from an outage, does
// not take it over for a lease; once it has, w1 can neither record a step,
// renew, release nor finish, while w2 resumes from w1's recorded step.
func TestFencing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	consumer := "jobtest-" + tenant
	key := Key{Tenant: tenant, Consumer: consumer, ID: "exp-1"}
	unused := func(context.Context, *Job) (json.RawMessage, error) { panic("not run") }
	newWorker := func(owner string) *Worker {
		w, err := NewWorker(pool, Options{Consumer: consumer, Owner: owner, Lease: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond}, unused, zerolog.Nop())
		require.NoError(t, err)
		return w
	}
	w1, w2 := newWorker("w1"), newWorker("w2")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = Enqueue(ctx, tx, New{Key: key, Kind: "experiment"})
	if err != nil {
		_ = tx.Rollback(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	leaseOne := func(w *Worker) *Job {
		t.Helper()
		js, err := w.lease(ctx, 10)
		require.NoError(t, err)
		require.Len(t, js, 1)
		return js[0]
	}
	runs := map[string]int{}
	step := func(name string) func(context.Context) (json.RawMessage, error) {
		return func(context.Context) (json.RawMessage, error) {
			runs[name]++
			return json.RawMessage(`{"step":"` + name + `"}`), nil
		}
	}

	j1 := leaseOne(w1)
	require.Equal(t, 1, j1.Attempt)
	js, err := w2.lease(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, js, "a live lease is not taken over")
	out, err := j1.Step(ctx, "a", step("a"))
	require.NoError(t, err)
	require.JSONEq(t, `{"step":"a"}`, string(out))

	expired := func() bool {
		s, err := Get(ctx, pool, key)
		require.NoError(t, err)
		return s.LeaseLeft <= 0
	}
	testenv.Eventually(t, 10*time.Second, expired, "w1's lease never expired")
	// The token decides, not the clock: expired, but taken over by nobody,
	// the lease is still w1's to renew.
	held, _, _, err := w1.extend(ctx, j1)
	require.NoError(t, err)
	require.True(t, held, "an expired lease nobody took over is renewed")
	testenv.Eventually(t, 10*time.Second, expired, "w1's lease never expired")
	// A worker just back from an outage leaves expired leases to their
	// holders for a lease; then it takes them over.
	w2.observe(io.ErrUnexpectedEOF)
	w2.observe(nil)
	js, err = w2.lease(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, js, "no takeover right after an outage")
	testenv.Eventually(t, 10*time.Second, w2.mayTakeOver, "w2 never allowed to take over")
	j2 := leaseOne(w2)
	require.Equal(t, 2, j2.Attempt)
	require.Greater(t, j2.token, j1.token)

	// w1 computes step b, but cannot record it.
	_, err = j1.Step(ctx, "b", step("b"))
	require.ErrorIs(t, err, ErrLeaseLost)
	require.Equal(t, 1, runs["b"], "the step ran; only its recording was refused")
	held, _, _, err = w1.extend(ctx, j1)
	require.NoError(t, err)
	require.False(t, held, "w1's heartbeat must find its lease gone")
	require.ErrorIs(t, w1.settle(j1, json.RawMessage(`{"by":"w1"}`), nil, nil), ErrLeaseLost)
	require.ErrorIs(t, w1.settle(j1, nil, context.DeadlineExceeded, nil), ErrLeaseLost)
	require.ErrorIs(t, w1.release(ctx, pool, j1, verdict{}), ErrLeaseLost)

	s, err := Get(ctx, pool, key)
	require.NoError(t, err)
	require.Equal(t, Running, s.State)
	require.Equal(t, "w2", s.LeaseOwner)
	require.Equal(t, 2, s.Attempts)
	require.Nil(t, s.Result)

	// w2 finds step a done by w1 and runs b itself.
	out, err = j2.Step(ctx, "a", step("a"))
	require.NoError(t, err)
	require.JSONEq(t, `{"step":"a"}`, string(out))
	require.Equal(t, 1, runs["a"], "a recorded step is not run again")
	_, err = j2.Step(ctx, "b", step("b"))
	require.NoError(t, err)
	require.Equal(t, 2, runs["b"])
	require.NoError(t, w2.settle(j2, json.RawMessage(`{"by":"w2"}`), nil, nil))

	s, err = Get(ctx, pool, key)
	require.NoError(t, err)
	require.Equal(t, Succeeded, s.State)
	require.JSONEq(t, `{"by":"w2"}`, string(s.Result))
	require.Empty(t, s.LeaseOwner)
	require.NotNil(t, s.FinishedAt)

	rows, err := pool.Query(ctx, `SELECT step, attempt FROM job_steps WHERE tenant_id = $1 AND consumer = $2 AND job_id = $3 ORDER BY step`,
		tenant, consumer, key.ID)
	require.NoError(t, err)
	type rec struct {
		Step    string
		Attempt int
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	require.NoError(t, err)
	require.Equal(t, []rec{{"a", 1}, {"b", 2}}, got)
}
