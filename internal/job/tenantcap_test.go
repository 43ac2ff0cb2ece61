package job_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/testenv"
)

// TestMaxRunningPerTenant: with a bound of 2, two workers of 3 slots each
// never run more than 2 of one tenant's jobs at once, start them in the
// order they were queued, and run another tenant's job meanwhile.
func TestMaxRunningPerTenant(t *testing.T) {
	h := newHarness(t)
	other := testenv.Tenant(t)
	var mu sync.Mutex
	running := map[string]int{}
	peak := map[string]int{}
	release := make(chan struct{})
	handler := func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		mu.Lock()
		running[j.Tenant]++
		peak[j.Tenant] = max(peak[j.Tenant], running[j.Tenant])
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[j.Tenant]--
			mu.Unlock()
		}()
		if j.Tenant == h.tenant {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		return json.RawMessage(`{}`), nil
	}
	for i := range 5 {
		h.enqueue(fmt.Sprintf("a-%d", i), "experiment", `{}`)
		time.Sleep(5 * time.Millisecond) // distinct due times: the queue's order
	}
	for _, owner := range []string{"w1", "w2"} {
		opts := h.options(owner)
		opts.Concurrency = 3
		opts.MaxRunningPerTenant = 2
		h.start(h.pool, opts, handler)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running[h.tenant] == 2
	}, "two of the tenant's jobs never ran")
	// Another tenant is not held up by the first one's bound.
	b := h.key("b-0")
	b.Tenant = other
	h.inTx(func(tx pgx.Tx) error {
		_, err := job.Enqueue(h.ctx(), tx, job.New{Key: b, Kind: "experiment"})
		return err
	})
	testenv.Eventually(t, 10*time.Second, func() bool {
		s, err := job.Get(h.ctx(), h.pool, b)
		return err == nil && s.State == job.Succeeded
	}, "the other tenant's job did not run while the first tenant was at its bound")
	// Still 2: the other three wait.
	queued := 0
	for i := range 5 {
		if h.state(fmt.Sprintf("a-%d", i)) == job.Queued {
			queued++
		}
	}
	require.Equal(t, 3, queued, "jobs over the bound wait in the queue")
	close(release)
	for i := range 5 {
		id := fmt.Sprintf("a-%d", i)
		testenv.Eventually(t, 20*time.Second, func() bool { return h.state(id) == job.Succeeded }, "job %s never ran", id)
	}
	mu.Lock()
	require.Equal(t, 2, peak[h.tenant], "never more than the bound at once")
	mu.Unlock()
	// Leases follow the queue: a job is never first leased before one
	// queued ahead of it (two leased by one statement share the time).
	for i := 1; i < 5; i++ {
		prev, cur := h.status(fmt.Sprintf("a-%d", i-1)), h.status(fmt.Sprintf("a-%d", i))
		require.False(t, cur.StartedAt.Before(*prev.StartedAt), "a-%d leased before a-%d", i, i-1)
	}
}

// TestMaxRunningPerTenantCancelsQueued: a job cancelled while it waits
// behind the bound ends cancelled at once, without waiting for a slot.
func TestMaxRunningPerTenantCancelsQueued(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.enqueue("first", "experiment", `{}`)
	time.Sleep(5 * time.Millisecond)
	h.enqueue("second", "experiment", `{}`)
	opts := h.options("w")
	opts.Concurrency = 2
	opts.MaxRunningPerTenant = 1
	h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return nil, nil
	})
	testenv.Eventually(t, 10*time.Second, func() bool { return h.state("first") == job.Running }, "first job not running")
	require.Equal(t, job.Queued, h.state("second"))
	h.inTx(func(tx pgx.Tx) error {
		_, err := job.RequestCancel(h.ctx(), tx, h.key("second"), "not needed")
		return err
	})
	testenv.Eventually(t, 5*time.Second, func() bool { return h.state("second") == job.Cancelled }, "queued job not cancelled")
	require.Equal(t, job.Running, h.state("first"))
}

// TestAfterDone: AfterDone runs once per job, after its outcome and what
// OnDone wrote have committed.
func TestAfterDone(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	seen := map[string][]string{}
	opts := h.options("w")
	opts.AfterDone = func(ctx context.Context, j *job.Job, o job.Outcome) {
		// A fresh connection sees the committed outcome and marker.
		s, err := job.Get(ctx, h.pool, h.key(j.ID))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			seen[j.ID] = append(seen[j.ID], "error: "+err.Error())
			return
		}
		seen[j.ID] = append(seen[j.ID], fmt.Sprintf("%s/%s/%v", o.State, s.State, h.committedDone(j.ID)))
	}
	h.fail["exp-1"] = 1 // the first OnDone fails: no AfterDone for it
	h.enqueue("exp-1", "experiment", `{}`)
	h.start(h.pool, opts, func(context.Context, *job.Job) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })
	testenv.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["exp-1"]) > 0
	}, "AfterDone never ran")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"succeeded/succeeded/[succeeded]"}, seen["exp-1"])
}

// TestSteps: a resumed attempt reads every step recorded before.
func TestSteps(t *testing.T) {
	h := newHarness(t)
	h.enqueue("exp-1", "experiment", `{}`)
	attempts := newCounter()
	got := make(chan map[string]string, 1)
	opts := h.options("w")
	h.start(h.pool, opts, func(ctx context.Context, j *job.Job) (json.RawMessage, error) {
		if attempts.inc("a") == 1 {
			for _, k := range []string{"s1", "s2"} {
				if _, err := j.Step(ctx, k, func(context.Context) (json.RawMessage, error) { return json.Marshal(k) }); err != nil {
					return nil, err
				}
			}
			return nil, fmt.Errorf("transient")
		}
		steps, err := j.Steps(ctx)
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for k, v := range steps {
			out[k] = string(v)
		}
		got <- out
		return nil, nil
	})
	select {
	case s := <-got:
		require.Equal(t, map[string]string{"s1": `"s1"`, "s2": `"s2"`}, s)
	case <-time.After(20 * time.Second):
		t.Fatal("no second attempt")
	}
}
