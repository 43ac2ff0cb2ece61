package quality

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// metricsLock creates the missing rows of keys and reads every row of
// them, locked until the transaction ends, as statements that ride with
// the inbox claim (database.BeginClaimWith): the scorer's state is read in
// the claim's round trip. Rows are created and locked in key order, so two
// scorers touching the same targets cannot deadlock. After the round trip,
// rows holds the metrics by key, and created the keys whose rows the
// insert created.
type metricsLock struct {
	keys    []Key
	rows    map[Key]*Metrics
	created []Key
}

func newMetricsLock(keys []Key) *metricsLock {
	sortKeys(keys)
	return &metricsLock{keys: keys}
}

func sortKeys(keys []Key) {
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
}

// queue adds the statements to b. The insert creates the missing rows and
// writes nothing for existing ones; the select, a statement of its own,
// sees them all, a concurrent insert's too (the insert waited for its
// outcome), and locks them in key order. FOR UPDATE marks a row; an
// upsert's DO UPDATE would write a whole new version of it, which the save
// writes again.
func (l *metricsLock) queue(b *pgx.Batch) {
	tenants, targets, ids := make([]string, len(l.keys)), make([]string, len(l.keys)), make([]string, len(l.keys))
	for i, k := range l.keys {
		tenants[i], targets[i], ids[i] = k.Tenant, k.Target, k.ID
	}
	b.Queue(`
		INSERT INTO quality_metrics (tenant_id, target, target_key)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
		ON CONFLICT DO NOTHING
		RETURNING tenant_id, target, target_key`, tenants, targets, ids)
	b.Queue(`
		SELECT `+metricsColumns+`, m.newest_seqs
		FROM quality_metrics m JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(t, g, k)
		  ON m.tenant_id = u.t AND m.target = u.g AND m.target_key = u.k
		ORDER BY m.tenant_id, m.target, m.target_key
		FOR UPDATE OF m`, tenants, targets, ids)
}

// read reads the results of queue's statements.
func (l *metricsLock) read(br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("create metrics rows: %w", err)
	}
	for rows.Next() {
		var k Key
		if err := rows.Scan(&k.Tenant, &k.Target, &k.ID); err != nil {
			rows.Close()
			return fmt.Errorf("create metrics rows: %w", err)
		}
		l.created = append(l.created, k)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("create metrics rows: %w", err)
	}
	rows, err = br.Query()
	if err != nil {
		return fmt.Errorf("lock metrics rows: %w", err)
	}
	list, err := scan(rows, true)
	if err != nil {
		return err
	}
	l.rows = make(map[Key]*Metrics, len(list))
	for _, m := range list {
		// The newest event is always first. A row whose list does not say
		// so was written before the list existed, or by an older scorer:
		// as_of_seq alone is what is known.
		if m.StateVersion > 0 && (len(m.newest) == 0 || m.newest[0] != m.AsOfSeq) {
			m.newest = []int64{m.AsOfSeq}
		}
		l.rows[m.Key] = m
	}
	return nil
}

// queueDrop queues the deletion of the rows of keys: rows the lock created
// for targets that gained nothing (events applied before, a copy naming
// another target than its original did), which must not appear as
// targets with no events.
func queueDrop(b *pgx.Batch, keys []Key) {
	if len(keys) == 0 {
		return
	}
	tenants, targets, ids := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], targets[i], ids[i] = k.Tenant, k.Target, k.ID
	}
	b.Queue(`
		DELETE FROM quality_metrics m USING unnest($1::text[], $2::text[], $3::text[]) AS u(t, g, k)
		WHERE m.tenant_id = u.t AND m.target = u.g AND m.target_key = u.k`, tenants, targets, ids)
}

// queueSave queues the statement that writes ms back, so it shares a round
// trip with the outbox rows of the same transaction. History arrays travel
// as one text literal each: pgx has no 2-D array of ragged rows.
func queueSave(b *pgx.Batch, ms []*Metrics) {
	n := len(ms)
	var (
		tenants, targets, ids, tools, hashes, pids, hist = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		newest                                           = make([]string, n)
		versions, consec                                 = make([]int32, n), make([]int32, n)
		sv, asOf, calls, succ, fail                      = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		latSum, latN, ratSum, ratN, fbSum, fbN, lastOK   = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		rate, quality                                    = make([]float64, n), make([]float64, n)
	)
	for i, m := range ms {
		tenants[i], targets[i], ids[i] = m.Tenant, m.Target, m.ID
		tools[i], hashes[i], pids[i] = m.ToolName, m.PromptHash, m.PromptID
		versions[i], consec[i] = int32(m.PromptVersion), int32(m.ConsecutiveFailures)
		sv[i], asOf[i], calls[i], succ[i], fail[i] = m.StateVersion, m.AsOfSeq, m.TotalCalls, m.Successes, m.Failures
		latSum[i], latN[i], ratSum[i], ratN[i] = m.LatencySumUs, m.LatencyCount, m.RatingSumMicro, m.RatingCount
		fbSum[i], fbN[i], lastOK[i] = m.FeedbackSumMicro, m.FeedbackCount, m.LastSuccessSeq
		rate[i], quality[i] = m.SuccessRate(), m.Quality()
		hist[i], newest[i] = arrayLiteral(m.History), arrayLiteral(m.newest)
	}
	b.Queue(`
		UPDATE quality_metrics m SET
			tool_name = nullif(u.tool_name, ''), prompt_hash = nullif(u.prompt_hash, ''),
			prompt_id = nullif(u.prompt_id, ''), prompt_version = nullif(u.prompt_version, 0),
			state_version = u.state_version, as_of_seq = u.as_of_seq,
			total_calls = u.total_calls, successes = u.successes, failures = u.failures,
			latency_sum_us = u.latency_sum_us, latency_count = u.latency_count,
			rating_sum_micro = u.rating_sum_micro, rating_count = u.rating_count,
			feedback_sum_micro = u.feedback_sum_micro, feedback_count = u.feedback_count,
			last_success_seq = u.last_success_seq, consecutive_failures = u.consecutive_failures,
			history = u.history::bigint[], newest_seqs = u.newest_seqs::bigint[],
			success_rate = u.success_rate, quality_score = u.quality_score, updated_at = now()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[],
		            $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
		            $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::bigint[],
		            $19::bigint[], $20::int[], $21::text[], $22::float8[], $23::float8[], $24::text[])
		  AS u(tenant_id, target, target_key, tool_name, prompt_hash, prompt_id, prompt_version,
		       state_version, as_of_seq, total_calls, successes, failures,
		       latency_sum_us, latency_count, rating_sum_micro, rating_count, feedback_sum_micro, feedback_count,
		       last_success_seq, consecutive_failures, history, success_rate, quality_score, newest_seqs)
		WHERE m.tenant_id = u.tenant_id AND m.target = u.target AND m.target_key = u.target_key`,
		tenants, targets, ids, tools, hashes, pids, versions,
		sv, asOf, calls, succ, fail,
		latSum, latN, ratSum, ratN, fbSum, fbN,
		lastOK, consec, hist, rate, quality, newest)
}

func arrayLiteral(vs []int64) string {
	b := make([]byte, 0, 2+len(vs)*8)
	b = append(b, '{')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, '}'))
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
	return scan(rows, false)
}

const metricsColumns = `m.tenant_id, m.target, m.target_key,
	coalesce(m.tool_name, ''), coalesce(m.prompt_hash, ''), coalesce(m.prompt_id, ''), coalesce(m.prompt_version, 0),
	m.state_version, m.as_of_seq, m.total_calls, m.successes, m.failures,
	m.latency_sum_us, m.latency_count, m.rating_sum_micro, m.rating_count,
	m.feedback_sum_micro, m.feedback_count, m.last_success_seq, m.consecutive_failures, m.history`

// scan reads rows of metricsColumns, followed by newest_seqs when newest
// is set.
func scan(rows pgx.Rows, newest bool) ([]*Metrics, error) {
	defer rows.Close()
	var out []*Metrics
	for rows.Next() {
		m := &Metrics{}
		dest := []any{&m.Tenant, &m.Target, &m.ID,
			&m.ToolName, &m.PromptHash, &m.PromptID, &m.PromptVersion,
			&m.StateVersion, &m.AsOfSeq, &m.TotalCalls, &m.Successes, &m.Failures,
			&m.LatencySumUs, &m.LatencyCount, &m.RatingSumMicro, &m.RatingCount,
			&m.FeedbackSumMicro, &m.FeedbackCount, &m.LastSuccessSeq, &m.ConsecutiveFailures, &m.History}
		if newest {
			dest = append(dest, &m.newest)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scan metrics: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// Reset deletes the scorer's derived state — metrics and inbox — of one
// tenant, or of every tenant when tenant is "", inside tx (a rebuild's
// transaction: see the replay package).
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM quality_metrics WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
		return fmt.Errorf("reset metrics: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return nil
}
