package rating

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
)

// budgetKey is one tenant's UTC day.
type budgetKey struct {
	Tenant string
	Day    string // YYYY-MM-DD
}

// lookup reads, in one round trip and outside any transaction, which of
// the items' events the inbox holds already and what their tenants spent
// on the days of their events.
func (r *Rater) lookup(ctx context.Context, items []*item) (map[database.InboxKey]bool, map[budgetKey]int64, error) {
	tenants, ids := make([]string, len(items)), make([]string, len(items))
	days := make([]string, len(items))
	for i, it := range items {
		tenants[i], ids[i], days[i] = it.key.Tenant, it.key.EventID, Day(it.d.Time)
	}
	b := &pgx.Batch{}
	b.Queue(`
		SELECT i.tenant_id, i.event_id FROM inbox i
		JOIN unnest($2::text[], $3::text[]) AS u(t, e) ON i.tenant_id = u.t AND i.event_id = u.e
		WHERE i.consumer = $1`, r.opts.Consumer, tenants, ids)
	budget := r.opts.Rater.DailyTokens > 0
	if budget {
		b.Queue(`
			SELECT b.tenant_id, b.day::text, b.tokens FROM rater_budget b
			JOIN (SELECT DISTINCT t, d::date FROM unnest($1::text[], $2::text[]) AS u(t, d)) u ON b.tenant_id = u.t AND b.day = u.d`,
			tenants, days)
	}
	br := r.pool.SendBatch(ctx, b)
	defer br.Close()
	known := map[database.InboxKey]bool{}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("inbox lookup: %w", err)
	}
	for rows.Next() {
		var k database.InboxKey
		if err := rows.Scan(&k.Tenant, &k.EventID); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("inbox lookup: %w", err)
		}
		known[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("inbox lookup: %w", err)
	}
	spent := map[budgetKey]int64{}
	if budget {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, fmt.Errorf("budget lookup: %w", err)
		}
		for rows.Next() {
			var k budgetKey
			var n int64
			if err := rows.Scan(&k.Tenant, &k.Day, &n); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("budget lookup: %w", err)
			}
			spent[k] = n
		}
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("budget lookup: %w", err)
		}
	}
	return known, spent, br.Close()
}

// queueRatings queues the insert of the items' ratings.
func queueRatings(b *pgx.Batch, items []*item) {
	if len(items) == 0 {
		return
	}
	n := len(items)
	var (
		tenants, ids, targets, keys, tools, hashes, pids = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		kinds, raters, reasons                           = make([]string, n), make([]string, n), make([]string, n)
		seqs                                             = make([]int64, n)
		versions, tokens, latencies                      = make([]int32, n), make([]int32, n), make([]int32, n)
		scores, rels, cors                               = make([]float64, n), make([]float64, n), make([]float64, n)
		injections                                       = make([]bool, n)
	)
	for i, it := range items {
		c, rt := it.call, it.rating
		tenants[i], ids[i], seqs[i] = it.key.Tenant, it.key.EventID, int64(it.d.StreamSeq)
		targets[i], keys[i], tools[i], hashes[i], pids[i], versions[i] = c.Target, c.Key(), c.ToolName, c.PromptHash, c.PromptID, int32(c.Version)
		scores[i], rels[i], cors[i] = rt.Score(), rt.Relevance, rt.Correctness
		kinds[i], raters[i], reasons[i] = rt.Kind, rt.Rater, reasonText(rt.Reason)
		tokens[i], latencies[i], injections[i] = int32(min(rt.Tokens, 1<<31-1)), int32(min(rt.LatencyMs, 1<<31-1)), rt.Injection
	}
	b.Queue(`
		INSERT INTO ratings (tenant_id, event_id, stream_seq, target, target_key, tool_name, prompt_hash, prompt_id, prompt_version,
		                     rating, relevance, correctness, rater_kind, rater, tokens, latency_ms, injection_suspected, reason)
		SELECT t, e, s, tg, k, nullif(tn, ''), nullif(ph, ''), nullif(pi, ''), nullif(pv, 0), r, rl, cr, kd, rt, tk, lt, inj, rs
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[],
		            $10::float8[], $11::float8[], $12::float8[], $13::text[], $14::text[], $15::int[], $16::int[], $17::bool[], $18::text[])
		  AS u(t, e, s, tg, k, tn, ph, pi, pv, r, rl, cr, kd, rt, tk, lt, inj, rs)
		ON CONFLICT (tenant_id, event_id) DO NOTHING`,
		tenants, ids, seqs, targets, keys, tools, hashes, pids, versions,
		scores, rels, cors, kinds, raters, tokens, latencies, injections, reasons)
}

// chargeTimeout bounds charging tokens on their own (charge).
const chargeTimeout = 5 * time.Second

// charge stores the tokens spent that no batch transaction charged: those
// of calls whose event was not rated (a summary followed by an outage, a
// call cut off), when the batch committed nothing, or whose transaction
// failed. It runs on a shutdown too, within its own deadline: the tokens
// are spent either way. What it cannot store waits for the next batch.
func (r *Rater) charge(ctx context.Context) {
	spend := r.unbilled.take()
	if len(spend) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chargeTimeout)
	defer cancel()
	b := &pgx.Batch{}
	queueSpend(b, spend)
	if err := r.pool.SendBatch(ctx, b).Close(); err != nil {
		r.unbilled.putBack(spend)
		r.log.Debug().Err(err).Msg("tokens spent not charged yet; charged with the next batch")
	}
}

// queueSpend queues the charge of the tokens spent, per tenant and day, in
// a fixed order so two copies charging the same rows cannot deadlock.
func queueSpend(b *pgx.Batch, spend map[budgetKey]int64) {
	if len(spend) == 0 {
		return
	}
	keys := make([]budgetKey, 0, len(spend))
	for k := range spend {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b budgetKey) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.Day, b.Day)
	})
	tenants, days, tokens := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		tenants[i], days[i], tokens[i] = k.Tenant, k.Day, spend[k]
	}
	b.Queue(`
		INSERT INTO rater_budget AS b (tenant_id, day, tokens)
		SELECT t, d::date, n FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(t, d, n, o) ORDER BY o
		ON CONFLICT (tenant_id, day) DO UPDATE SET tokens = b.tokens + excluded.tokens, updated_at = now()`,
		tenants, days, tokens)
}

// maxReason bounds a reason, in runes, as the result schemas do.
const maxReason = 2048

func reasonText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if r := []rune(s); len(r) > maxReason {
		return string(r[:maxReason-1]) + "…"
	}
	return s
}

// resultData is the data of tool.rated and prompt.rated.
type resultData struct {
	ToolName           string  `json:"tool_name,omitempty"`
	PromptHash         string  `json:"prompt_hash,omitempty"`
	PromptID           string  `json:"prompt_id,omitempty"`
	Version            int     `json:"version,omitempty"`
	Rating             float64 `json:"rating"`
	Relevance          float64 `json:"relevance"`
	Correctness        float64 `json:"correctness"`
	RaterKind          string  `json:"rater_kind"`
	Rater              string  `json:"rater"`
	Reason             string  `json:"reason,omitempty"`
	RunID              string  `json:"run_id,omitempty"`
	StepIdx            *int64  `json:"step_idx,omitempty"`
	TokensUsed         int     `json:"tokens_used"`
	LatencyMs          int64   `json:"latency_ms"`
	InjectionSuspected bool    `json:"injection_suspected,omitempty"`
}

// result builds the tool.rated or prompt.rated event of a rated item.
func (r *Rater) result(it *item) (event.Event, error) {
	c, rt := it.call, it.rating
	data := resultData{
		Rating: rt.Score(), Relevance: rt.Relevance, Correctness: rt.Correctness,
		RaterKind: rt.Kind, Rater: rt.Rater, Reason: reasonText(rt.Reason),
		RunID: c.RunID, StepIdx: c.StepIdx, TokensUsed: rt.Tokens, LatencyMs: rt.LatencyMs,
		InjectionSuspected: rt.Injection,
	}
	typ := TypeToolRated
	if c.Target == TargetTool {
		data.ToolName = c.ToolName
	} else {
		typ = TypePromptRated
		data.PromptHash, data.PromptID, data.Version = c.PromptHash, c.PromptID, c.Version
	}
	return bus.NewResult(r.opts.Consumer, typ, it.d.Event, data)
}

// Stored is one row of the rater's ratings: what it rated and how.
type Stored struct {
	Tenant             string
	EventID            string
	StreamSeq          int64
	Target             string
	TargetKey          string
	ToolName           string
	PromptHash         string
	PromptID           string
	PromptVersion      int
	Rating             float64
	Relevance          float64
	Correctness        float64
	RaterKind          string
	Rater              string
	Tokens             int
	InjectionSuspected bool
	Reason             string
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// List returns a tenant's ratings ordered by stream sequence, then event id.
func List(ctx context.Context, db Querier, tenant string) ([]Stored, error) {
	rows, err := db.Query(ctx, `
		SELECT tenant_id, event_id, stream_seq, target, target_key, coalesce(tool_name, ''), coalesce(prompt_hash, ''),
		       coalesce(prompt_id, ''), coalesce(prompt_version, 0), rating, relevance, correctness,
		       rater_kind, rater, tokens, injection_suspected, reason
		FROM ratings WHERE tenant_id = $1 ORDER BY stream_seq, event_id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list ratings: %w", err)
	}
	defer rows.Close()
	out := []Stored{}
	for rows.Next() {
		var s Stored
		if err := rows.Scan(&s.Tenant, &s.EventID, &s.StreamSeq, &s.Target, &s.TargetKey, &s.ToolName, &s.PromptHash,
			&s.PromptID, &s.PromptVersion, &s.Rating, &s.Relevance, &s.Correctness,
			&s.RaterKind, &s.Rater, &s.Tokens, &s.InjectionSuspected, &s.Reason); err != nil {
			return nil, fmt.Errorf("scan rating: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list ratings: %w", err)
	}
	return out, nil
}

// Spent returns the tokens tenant spent on ratings on day (YYYY-MM-DD).
func Spent(ctx context.Context, db Querier, tenant, day string) (int64, error) {
	rows, err := db.Query(ctx, `SELECT tokens FROM rater_budget WHERE tenant_id = $1 AND day = $2::date`, tenant, day)
	if err != nil {
		return 0, fmt.Errorf("read budget: %w", err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("read budget: %w", err)
		}
	}
	return n, rows.Err()
}

// Reset deletes the rater's ratings and inbox rows of one tenant, or of
// every tenant when tenant is "", inside tx (a rebuild's transaction: see
// the replay package). The token spend is kept: it is money spent, not
// state derived from the stream.
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM ratings WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
		return fmt.Errorf("reset ratings: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset inbox: %w", err)
	}
	return nil
}
