package lab_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/testenv"
)

// The feedback read model's events of a batch are applied in one
// transaction, in their place among the batch's other events; feedback and
// prompt.used rows past AGENTQ_LAB_FEEDBACK_RETENTION are pruned, and an
// event already past it is not stored.
func TestFeedbackRowsBatchedAndPruned(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, cfg.Lab.FeedbackRetention)
	l, err := lab.New(pool, outbox.Discard, lab.Options{Lab: cfg.Lab}, testenv.Logger(t))
	require.NoError(t, err)

	now := time.Now().UTC().Truncate(time.Millisecond)
	seq := uint64(0)
	delivery := func(typ string, at time.Time, data any) *bus.Delivery {
		ev, err := bus.NewEvent(typ, tenant, "test", data)
		require.NoError(t, err)
		ev.SetTime(at)
		seq++
		return &bus.Delivery{Event: ev, Tenant: tenant, StreamSeq: seq, Time: at}
	}
	used := func(run string, at time.Time) *bus.Delivery {
		return delivery(bus.Type("prompt", "used"), at, map[string]any{"prompt_id": "p", "run_id": run, "input": "q " + run, "output": "a " + run})
	}
	// Rows stored a month ago and a day short of it.
	for run, age := range map[string]time.Duration{"month": 31 * 24 * time.Hour, "fresh": 29 * 24 * time.Hour} {
		_, err := pool.Exec(ctx, `INSERT INTO lab_prompt_uses (tenant_id, event_id, run_id, stream_seq, input, used_at)
			VALUES ($1, $2, $2, 0, 'q', $3)`, tenant, "old-"+run, now.Add(-age))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO lab_feedback (tenant_id, event_id, prompt_id, thumbs, query, submitted_at)
			VALUES ($1, $2, 'p', 'down', 'q', $3)`, tenant, "old-"+run, now.Add(-age))
		require.NoError(t, err)
	}

	bad := used("bad", now)
	bad.Event.DataEncoded = []byte(`{"run_id": `)
	cancel := delivery(lab.TypeCancelled, now, map[string]any{"experiment_id": "nope"})
	batch := []*bus.Delivery{
		used("r1", now.Add(-time.Minute)),
		delivery(bus.Type("feedback", "submitted"), now, map[string]any{"target": "prompt", "prompt_id": "p", "run_id": "r1", "thumbs": "down"}),
		delivery(bus.Type("feedback", "submitted"), now, map[string]any{"target": "prompt", "prompt_id": "p", "thumbs": "up"}), // not kept
		used("r2", now),
		used("stale", now.Add(-40*24*time.Hour)), // applied, not stored
		delivery(bus.Type("feedback", "submitted"), now.Add(-40*24*time.Hour), map[string]any{"target": "prompt", "prompt_id": "p", "thumbs": "down", "query": "stale"}), // same
		bad,
		cancel, // a transaction of its own, between the rows
		used("r3", now),
	}
	errs := l.HandleBatch(ctx, batch)
	require.Len(t, errs, len(batch))
	for i, err := range errs {
		if batch[i] == bad {
			require.True(t, bus.IsPermanent(err), "undecodable prompt.used fails alone: %v", err)
			continue
		}
		require.NoError(t, err, "event %d", i)
	}

	runs := testenv.Strings(t, pool, `SELECT run_id FROM lab_prompt_uses WHERE tenant_id = $1 ORDER BY run_id`, tenant)
	require.Equal(t, []string{"old-fresh", "r1", "r2", "r3"}, runs, "the month-old row pruned, the stale event not stored")
	var usedAt time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT used_at FROM lab_prompt_uses WHERE tenant_id = $1 AND run_id = 'r1'`, tenant).Scan(&usedAt))
	require.Equal(t, now.Add(-time.Minute), usedAt.UTC(), "a use is kept at its event's time")
	feedback := testenv.Strings(t, pool, `SELECT event_id FROM lab_feedback WHERE tenant_id = $1 ORDER BY event_id`, tenant)
	require.Equal(t, []string{batch[1].Event.ID(), "old-fresh"}, sorted(feedback),
		"the negative feedback kept, the positive one not, the month-old row pruned, the stale event not stored")

	// now() is a transaction's start: the rows before the cancellation
	// were applied in one transaction, the cancellation and the row after
	// it each in another.
	txOf := func(d *bus.Delivery) *time.Time {
		var at *time.Time
		err := pool.QueryRow(ctx, `SELECT processed_at FROM inbox WHERE consumer = 'lab' AND tenant_id = $1 AND event_id = $2`, tenant, d.Event.ID()).Scan(&at)
		if err != nil {
			return nil
		}
		return at
	}
	first := txOf(batch[0])
	require.NotNil(t, first)
	for _, i := range []int{1, 3, 4} {
		require.Equal(t, *first, *txOf(batch[i]), "event %d applied with the first", i)
	}
	require.Nil(t, txOf(batch[2]), "feedback the lab does not keep costs no claim")
	require.Nil(t, txOf(bad))
	require.Equal(t, *first, *txOf(batch[5]), "the stale feedback is claimed all the same")
	require.NotEqual(t, *first, *txOf(cancel))
	require.NotEqual(t, *txOf(cancel), *txOf(batch[8]))

	// A prune is due once an hour: a row that aged meanwhile waits.
	_, err = pool.Exec(ctx, `UPDATE lab_prompt_uses SET used_at = $2 WHERE tenant_id = $1 AND run_id = 'old-fresh'`, tenant, now.Add(-31*24*time.Hour))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE lab_feedback SET submitted_at = $2 WHERE tenant_id = $1 AND event_id = 'old-fresh'`, tenant, now.Add(-31*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []error{nil}, l.HandleBatch(ctx, []*bus.Delivery{used("r4", now)}))
	var left [2]int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM lab_prompt_uses WHERE tenant_id = $1 AND run_id = 'old-fresh'),
		(SELECT count(*) FROM lab_feedback WHERE tenant_id = $1 AND event_id = 'old-fresh')`, tenant).Scan(&left[0], &left[1]))
	require.Equal(t, [2]int{1, 1}, left)
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// A prune deletes a bounded number of rows per statement: a backlog past
// the retention goes over several batches of rows, one after another, not
// in one long transaction, and the rows within it stay.
func TestFeedbackPruneBounded(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	cfg, err := config.Load(func(string) string { return "" })
	require.NoError(t, err)
	l, err := lab.New(pool, outbox.Discard, lab.Options{Lab: cfg.Lab}, testenv.Logger(t))
	require.NoError(t, err)
	now := time.Now().UTC()
	const backlog = 2500 // over twice the bound of a prune
	for _, table := range []string{"lab_feedback", "lab_prompt_uses"} {
		q := `INSERT INTO lab_feedback (tenant_id, event_id, prompt_id, thumbs, query, submitted_at)
			SELECT $1, 'old-' || i, 'p', 'down', 'q', $2 FROM generate_series(1, $3) i`
		if table == "lab_prompt_uses" {
			q = `INSERT INTO lab_prompt_uses (tenant_id, event_id, run_id, stream_seq, input, used_at)
				SELECT $1, 'old-' || i, 'r' || i, 0, 'q', $2 FROM generate_series(1, $3) i`
		}
		_, err := pool.Exec(ctx, q, tenant, now.Add(-31*24*time.Hour), backlog)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, strings.Replace(q, "'old-'", "'new-'", 1), tenant, now.Add(-29*24*time.Hour), 3)
		require.NoError(t, err)
	}
	count := func(table, prefix string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE tenant_id = $1 AND event_id LIKE $2`,
			tenant, prefix+"%").Scan(&n))
		return n
	}
	var left []int
	for i := 0; count("lab_feedback", "old-")+count("lab_prompt_uses", "old-") > 0; i++ {
		require.Less(t, i, 10, "the backlog is never pruned: %v left after each batch", left)
		ev, err := bus.NewEvent(bus.Type("prompt", "used"), tenant, "test", map[string]any{"prompt_id": "p", "run_id": fmt.Sprint("run", i), "input": "q"})
		require.NoError(t, err)
		require.Equal(t, []error{nil}, l.HandleBatch(ctx, []*bus.Delivery{{Event: ev, Tenant: tenant, StreamSeq: uint64(i + 1), Time: now}}))
		left = append(left, count("lab_feedback", "old-"))
		require.Equal(t, left[len(left)-1], count("lab_prompt_uses", "old-"), "both tables pruned alike")
	}
	require.GreaterOrEqual(t, len(left), 3, "a prune is bounded (at most 1,000 rows a table), and due again while rows are left: %v", left)
	require.GreaterOrEqual(t, left[0], backlog-1000, "the first prune deleted at most its bound")
	require.Equal(t, 3, count("lab_feedback", "new-"), "rows within the retention stay")
	require.Equal(t, 3, count("lab_prompt_uses", "new-"))
}
