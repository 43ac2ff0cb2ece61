package quality

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// lockMetrics returns the current metrics of keys, creating missing rows,
// with every row locked until tx ends. Keys are locked in sorted order so
// two scorers touching the same targets cannot deadlock.
func lockMetrics(ctx context.Context, tx pgx.Tx, keys []Key) (map[Key]*Metrics, error) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.ID < b.ID
	})
	tenants, targets, ids := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], targets[i], ids[i] = k.Tenant, k.Target, k.ID
	}
	// One statement creates missing rows, locks every row (in key order)
	// and reads it: DO UPDATE, unlike DO NOTHING, returns existing rows too.
	rows, err := tx.Query(ctx, `
		INSERT INTO quality_metrics AS m (tenant_id, target, target_key)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
		ON CONFLICT (tenant_id, target, target_key) DO UPDATE SET target_key = excluded.target_key
		RETURNING `+metricsColumns, tenants, targets, ids)
	if err != nil {
		return nil, fmt.Errorf("lock metrics rows: %w", err)
	}
	list, err := scanMetrics(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[Key]*Metrics, len(list))
	for _, m := range list {
		out[m.Key] = m
	}
	return out, nil
}

// queueSave queues the statement that writes ms back, so it shares a round
// trip with the outbox rows of the same transaction.
func queueSave(b *pgx.Batch, ms []*Metrics) {
	n := len(ms)
	var (
		tenants, targets, ids, tools, hashes, pids, lastIDs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions, consec, recentCount                       = make([]int32, n), make([]int32, n), make([]int32, n)
		calls, succ, fail, latN, ratN, fbN, recent          = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		latSum, ratSum, fbSum, rate, quality                = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	)
	for i, m := range ms {
		tenants[i], targets[i], ids[i] = m.Tenant, m.Target, m.ID
		tools[i], hashes[i], pids[i], lastIDs[i] = m.ToolName, m.PromptHash, m.PromptID, m.LastEventID
		versions[i], consec[i], recentCount[i] = int32(m.PromptVersion), int32(m.ConsecutiveFailures), int32(m.RecentCount)
		calls[i], succ[i], fail[i] = m.TotalCalls, m.Successes, m.Failures
		latN[i], ratN[i], fbN[i], recent[i] = m.LatencyCount, m.RatingCount, m.FeedbackCount, int64(m.RecentBits)
		latSum[i], ratSum[i], fbSum[i] = m.LatencySumMs, m.RatingSum, m.FeedbackSum
		rate[i], quality[i] = m.SuccessRate(), m.Quality()
	}
	b.Queue(`
		UPDATE quality_metrics m SET
			tool_name = nullif(u.tool_name, ''), prompt_hash = nullif(u.prompt_hash, ''),
			prompt_id = nullif(u.prompt_id, ''), prompt_version = nullif(u.prompt_version, 0),
			total_calls = u.total_calls, successes = u.successes, failures = u.failures,
			consecutive_failures = u.consecutive_failures,
			latency_sum_ms = u.latency_sum_ms, latency_count = u.latency_count,
			rating_sum = u.rating_sum, rating_count = u.rating_count,
			feedback_sum = u.feedback_sum, feedback_count = u.feedback_count,
			recent_bits = u.recent_bits, recent_count = u.recent_count,
			success_rate = u.success_rate, quality_score = u.quality_score,
			last_event_id = u.last_event_id, updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[],
		            $8::bigint[], $9::bigint[], $10::bigint[], $11::int[],
		            $12::float8[], $13::bigint[], $14::float8[], $15::bigint[],
		            $16::float8[], $17::bigint[], $18::bigint[], $19::int[],
		            $20::float8[], $21::float8[], $22::text[])
		  AS u(tenant_id, target, target_key, tool_name, prompt_hash, prompt_id, prompt_version,
		       total_calls, successes, failures, consecutive_failures,
		       latency_sum_ms, latency_count, rating_sum, rating_count,
		       feedback_sum, feedback_count, recent_bits, recent_count,
		       success_rate, quality_score, last_event_id)
		WHERE m.tenant_id = u.tenant_id AND m.target = u.target AND m.target_key = u.target_key`,
		tenants, targets, ids, tools, hashes, pids, versions,
		calls, succ, fail, consec,
		latSum, latN, ratSum, ratN,
		fbSum, fbN, recent, recentCount,
		rate, quality, lastIDs)
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Get returns the metrics of one target, or nil when it has none.
func Get(ctx context.Context, db Querier, k Key) (*Metrics, error) {
	all, err := List(ctx, db, k.Tenant, k.Target, k.ID)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	return all[0], nil
}

// List returns a tenant's metrics, all of them when target is "", one
// target kind, or one target when id is set too, ordered by target and id.
func List(ctx context.Context, db Querier, tenant, target, id string) ([]*Metrics, error) {
	rows, err := db.Query(ctx, `
		SELECT `+metricsColumns+`
		FROM quality_metrics m
		WHERE m.tenant_id = $1 AND ($2 = '' OR m.target = $2) AND ($3 = '' OR m.target_key = $3)
		ORDER BY m.target, m.target_key`, tenant, target, id)
	if err != nil {
		return nil, fmt.Errorf("list metrics: %w", err)
	}
	return scanMetrics(rows)
}

const metricsColumns = `m.tenant_id, m.target, m.target_key,
	coalesce(m.tool_name, ''), coalesce(m.prompt_hash, ''), coalesce(m.prompt_id, ''), coalesce(m.prompt_version, 0),
	m.total_calls, m.successes, m.failures, m.consecutive_failures,
	m.latency_sum_ms, m.latency_count, m.rating_sum, m.rating_count,
	m.feedback_sum, m.feedback_count, m.recent_bits, m.recent_count, coalesce(m.last_event_id, '')`

func scanMetrics(rows pgx.Rows) ([]*Metrics, error) {
	defer rows.Close()
	var out []*Metrics
	for rows.Next() {
		m := &Metrics{}
		var recent int64
		if err := rows.Scan(&m.Tenant, &m.Target, &m.ID,
			&m.ToolName, &m.PromptHash, &m.PromptID, &m.PromptVersion,
			&m.TotalCalls, &m.Successes, &m.Failures, &m.ConsecutiveFailures,
			&m.LatencySumMs, &m.LatencyCount, &m.RatingSum, &m.RatingCount,
			&m.FeedbackSum, &m.FeedbackCount, &recent, &m.RecentCount, &m.LastEventID); err != nil {
			return nil, fmt.Errorf("scan metrics: %w", err)
		}
		m.RecentBits = uint64(recent)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// Reset deletes the scorer's derived state — metrics and inbox — of one
// tenant, or of every tenant when tenant is "", so a replay from the
// stream rebuilds it. Other tenants' events are then recognised by the
// inbox during the replay and skipped.
func Reset(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, consumer, tenant string) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `DELETE FROM quality_metrics WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
		return fmt.Errorf("reset metrics: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return tx.Commit(ctx)
}
