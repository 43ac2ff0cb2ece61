package health

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/database"
)

// queueFacts adds to b the statements storing fs. A fact stored again under
// the same event id keeps the lowest stream sequence: the first occurrence
// in the stream counts, at its place, whichever copy committed first. The
// fold never runs past a sequence before every earlier event is settled, so
// moving a fact down never reorders what was already folded.
func queueFacts(b *pgx.Batch, tenant string, fs []fact) {
	var maxSeq uint64
	minSeq := ^uint64(0)
	for i, f := range fs {
		part := 0
		if i > 0 && fs[i-1].EventID == f.EventID {
			part = 1
		}
		var due *time.Time
		if !f.Due.IsZero() {
			d := f.Due
			due = &d
		}
		b.Queue(`
			INSERT INTO health_facts (tenant_id, event_id, part, stream_seq, kind, tool_name, bad, rating, at, due, reason, released_by, event_type, trace_parent, trace_state)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			ON CONFLICT (tenant_id, event_id, part) DO UPDATE SET stream_seq = excluded.stream_seq, at = excluded.at
			WHERE excluded.stream_seq < health_facts.stream_seq`,
			tenant, f.EventID, part, int64(f.Seq), int16(f.Kind), f.Tool, f.Bad, f.Rating, f.At, due, f.Reason, f.By, f.Type, f.Trace.Parent, f.Trace.State)
		maxSeq, minSeq = max(maxSeq, f.Seq), min(minSeq, f.Seq)
	}
	b.Queue(`
		INSERT INTO health_tenants (tenant_id, stored_through) VALUES ($1, $2)
		ON CONFLICT (tenant_id) DO UPDATE SET stored_through = greatest(health_tenants.stored_through, excluded.stored_through)`,
		tenant, int64(maxSeq))
	// A fact the fold has passed already (a redriven dead letter, which
	// counts at its original's place): the fold starts the tenant again.
	b.Queue(`UPDATE health_tenants SET refold_from = least(coalesce(refold_from, $2), $2) WHERE tenant_id = $1 AND evaluated_through >= $2`,
		tenant, int64(minSeq))
}

type tenantRow struct {
	evaluated, published uint64
	known, quarantined   int
	refold               bool // a late fact waits: fold from the first fact
}

func lockTenant(ctx context.Context, tx pgx.Tx, tenant string) (tenantRow, bool, error) {
	var r tenantRow
	var ev, pub int64
	var refold *int64
	err := tx.QueryRow(ctx, `SELECT evaluated_through, published_through, known, quarantined, refold_from FROM health_tenants WHERE tenant_id = $1 FOR UPDATE`, tenant).
		Scan(&ev, &pub, &r.known, &r.quarantined, &refold)
	if err == pgx.ErrNoRows {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("lock tenant %s: %w", tenant, err)
	}
	r.evaluated, r.published, r.refold = uint64(ev), uint64(pub), refold != nil
	return r, true, nil
}

func readFacts(ctx context.Context, tx pgx.Tx, tenant string, after, through uint64) ([]fact, error) {
	rows, err := tx.Query(ctx, `
		SELECT stream_seq, event_id, event_type, kind, tool_name, bad, rating, at, due, reason, released_by, trace_parent, trace_state
		FROM health_facts WHERE tenant_id = $1 AND stream_seq > $2 AND stream_seq <= $3
		ORDER BY stream_seq, part`, tenant, int64(after), int64(through))
	if err != nil {
		return nil, fmt.Errorf("read facts: %w", err)
	}
	defer rows.Close()
	var out []fact
	for rows.Next() {
		var f fact
		var seq int64
		var k int16
		var due *time.Time
		if err := rows.Scan(&seq, &f.EventID, &f.Type, &k, &f.Tool, &f.Bad, &f.Rating, &f.At, &due, &f.Reason, &f.By, &f.Trace.Parent, &f.Trace.State); err != nil {
			return nil, fmt.Errorf("read facts: %w", err)
		}
		f.Seq, f.Kind = uint64(seq), kind(k)
		if due != nil {
			f.Due = *due
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// loadTools reads the named tools and every tool held back by the cap
// (which a freed place may promote).
func loadTools(ctx context.Context, tx pgx.Tx, tenant string, names []string) (map[string]*Tool, error) {
	rows, err := tx.Query(ctx, `SELECT detail FROM health_tools WHERE tenant_id = $1 AND (tool_name = ANY($2) OR held_back)`, tenant, names)
	if err != nil {
		return nil, fmt.Errorf("load tools: %w", err)
	}
	defer rows.Close()
	out := map[string]*Tool{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, fmt.Errorf("load tools: %w", err)
		}
		var t Tool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("load tools: %w", err)
		}
		out[t.Name] = &t
	}
	return out, rows.Err()
}

func queueSaveTools(b *pgx.Batch, tenant string, tools map[string]*Tool) error {
	for _, t := range tools {
		raw, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("save tool %s: %w", t.Name, err)
		}
		var expires *time.Time
		if !t.Expires.IsZero() && (t.State == Quarantined || t.State == Probation) {
			e := t.Expires
			expires = &e
		}
		b.Queue(`
			INSERT INTO health_tools (tenant_id, tool_name, state, version, expires, held_back, quality, offences, since, reason, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (tenant_id, tool_name) DO UPDATE SET state = excluded.state, version = excluded.version,
				expires = excluded.expires, held_back = excluded.held_back, quality = excluded.quality,
				offences = excluded.offences, since = excluded.since, reason = excluded.reason, detail = excluded.detail`,
			tenant, t.Name, string(t.State), t.Version, expires, t.HeldBack, t.Quality(), t.Offences, t.Since, t.Reason, string(raw))
	}
	return nil
}

// Reset deletes the degrader's state of tenant ("" = every tenant) and
// its inbox rows, for a rebuild. published_through stays: the rebuild
// publishes only the transitions live processing had not published.
func Reset(ctx context.Context, tx pgx.Tx, consumer, tenant string) error {
	stmts := []string{
		`DELETE FROM health_facts WHERE ($1 = '' OR tenant_id = $1)`,
		`DELETE FROM health_tools WHERE ($1 = '' OR tenant_id = $1)`,
		`UPDATE health_tenants SET evaluated_through = 0, stored_through = 0, known = 0, quarantined = 0, refold_from = NULL WHERE ($1 = '' OR tenant_id = $1)`,
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s, tenant); err != nil {
			return fmt.Errorf("reset degrader state: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM inbox WHERE consumer = $1 AND ($2 = '' OR tenant_id = $2)`, consumer, tenant); err != nil {
		return fmt.Errorf("reset degrader inbox: %w", err)
	}
	return nil
}

// rebuilding returns the tenants whose rebuild is under way ("*": all).
func rebuilding(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, consumer string) (map[string]bool, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id FROM rebuilds WHERE consumer = $1`, consumer)
	if err != nil {
		return nil, fmt.Errorf("read rebuilds: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out[t] = true
	}
	return out, rows.Err()
}

var _ = database.Classify

// Health is one tool's health as agentq tool health shows it.
type Health struct {
	Tenant   string    `json:"tenant"`
	Tool     string    `json:"tool"`
	State    State     `json:"state"`
	Quality  float64   `json:"quality"`
	Baseline float64   `json:"baseline_failure_rate"`
	Calls    int64     `json:"calls"`
	Ratings  int64     `json:"ratings"`
	Evidence float64   `json:"evidence"`
	Offences int       `json:"offences"`
	HeldBack bool      `json:"held_back,omitempty"`
	Since    time.Time `json:"since"`
	Expires  time.Time `json:"expires,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	Version  int64     `json:"version"`
}

// List returns the health of every tool of tenant ("" = every tenant),
// by tenant and name, computed with p for the figures.
func List(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenant string, p Params) ([]Health, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id, detail FROM health_tools WHERE ($1 = '' OR tenant_id = $1) ORDER BY tenant_id, tool_name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list tool health: %w", err)
	}
	defer rows.Close()
	var out []Health
	for rows.Next() {
		var tn string
		var raw []byte
		if err := rows.Scan(&tn, &raw); err != nil {
			return nil, fmt.Errorf("list tool health: %w", err)
		}
		var t Tool
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("list tool health: %w", err)
		}
		e, _ := t.evidence(p)
		h := Health{Tenant: tn, Tool: t.Name, State: t.State, Quality: t.Quality(), Baseline: t.Signals[Calls].Base.rate(p),
			Calls: t.Signals[Calls].N, Ratings: t.Signals[Ratings].N, Evidence: e, Offences: t.Offences, HeldBack: t.HeldBack,
			Since: t.Since, Reason: t.Reason, Version: t.Version}
		if t.State == Quarantined || t.State == Probation {
			h.Expires = t.Expires
		}
		out = append(out, h)
	}
	return out, rows.Err()
}
