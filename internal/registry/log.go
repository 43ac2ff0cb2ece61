package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// Entry is one tool.registered as the indexer logged it (migration
// 00014), at its stream sequence: the indexer decides a tool's
// registrations again in stream order when one arrives after a later one
// was applied.
type Entry struct {
	Tenant, Name string
	StreamSeq    uint64
	EventID      string
	Hash         string
	// Def is the definition as given; nil when read back while the
	// history row its event created holds it.
	Def          *Tool
	RegisteredAt time.Time
}

// InsertLog logs e.
func InsertLog(ctx context.Context, db DB, e Entry) error {
	var def any
	if e.Def != nil {
		raw, err := json.Marshal(e.Def)
		if err != nil {
			return fmt.Errorf("encode log definition of %s: %w", e.EventID, err)
		}
		def = string(raw) // as text: see nullJSON
	}
	if _, err := db.Exec(ctx, `INSERT INTO tool_log (tenant_id, name, stream_seq, event_id, hash, definition, registered_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.Tenant, e.Name, int64(e.StreamSeq), e.EventID, e.Hash, def, e.RegisteredAt.UTC()); err != nil {
		return fmt.Errorf("log registration of %s: %w", e.Name, err)
	}
	return nil
}

// ReadLog returns the registrations of one tool, in stream order.
func ReadLog(ctx context.Context, db DB, tenant, name string) ([]Entry, error) {
	rows, err := db.Query(ctx, `SELECT stream_seq, event_id, hash, definition, registered_at
FROM tool_log WHERE tenant_id = $1 AND name = $2 ORDER BY stream_seq`, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("read log of %s: %w", name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		e := Entry{Tenant: tenant, Name: name}
		var seq int64
		var def []byte
		if err := r.Scan(&seq, &e.EventID, &e.Hash, &def, &e.RegisteredAt); err != nil {
			return e, err
		}
		e.StreamSeq, e.RegisteredAt = uint64(seq), e.RegisteredAt.UTC()
		if len(def) > 0 {
			e.Def = new(Tool)
			if err := json.Unmarshal(def, e.Def); err != nil {
				return e, fmt.Errorf("decode log definition of %s: %w", e.EventID, err)
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read log of %s: %w", name, err)
	}
	return out, nil
}

// Unlog deletes the entries of events (of tenant) from the log, so they
// can be logged again at another sequence.
func Unlog(ctx context.Context, db DB, tenant string, events []string) error {
	if len(events) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `DELETE FROM tool_log WHERE tenant_id = $1 AND event_id = ANY($2)`, tenant, events); err != nil {
		return fmt.Errorf("unlog: %w", err)
	}
	return nil
}

// KeepDefinition stores a registration's definition in the log: its
// event no longer has a history row that holds it.
func KeepDefinition(ctx context.Context, db DB, tenant, eventID string, t Tool) error {
	raw, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode log definition of %s: %w", eventID, err)
	}
	if _, err := db.Exec(ctx, `UPDATE tool_log SET definition = $3 WHERE tenant_id = $1 AND event_id = $2`, tenant, eventID, string(raw)); err != nil {
		return fmt.Errorf("keep log definition of %s: %w", eventID, err)
	}
	return nil
}

// Stored is a definition row with the event that created it, and for the
// current row the model of its vector.
type Stored struct {
	Tool
	EventID   string
	StreamSeq uint64
	Model     string
	Dim       int
}

// HistoryRows returns every definition of one tool, oldest version first.
func HistoryRows(ctx context.Context, db DB, tenant, name string) ([]Stored, error) {
	rows, err := db.Query(ctx, `SELECT `+Columns+`, t.event_id, t.stream_seq FROM tool_history t
WHERE t.tenant_id = $1 AND t.name = $2 ORDER BY t.version`, tenant, name)
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", name, err)
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		var s Stored
		var seq int64
		if s.Tool, err = Scan(rows, &s.EventID, &seq); err != nil {
			return nil, fmt.Errorf("history of %s: %w", name, err)
		}
		s.StreamSeq = uint64(seq)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history of %s: %w", name, err)
	}
	return out, nil
}

// Current returns the current row of a tool, or ErrNotFound.
func Current(ctx context.Context, db DB, tenant, name string) (Stored, error) {
	var s Stored
	var seq int64
	t, err := Scan(db.QueryRow(ctx, `SELECT `+Columns+`, t.event_id, t.stream_seq, t.embedding_model, t.embedding_dim FROM tools t
WHERE t.tenant_id = $1 AND t.name = $2`, tenant, name), &s.EventID, &seq, &s.Model, &s.Dim)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, ErrNotFound
	}
	if err != nil {
		return s, fmt.Errorf("tool %s: %w", name, err)
	}
	s.Tool, s.StreamSeq = t, uint64(seq)
	return s, nil
}

// ReplaceHistory makes rows the history of one tool, and nothing else.
func ReplaceHistory(ctx context.Context, db DB, tenant, name string, rows []Row) error {
	if _, err := db.Exec(ctx, `DELETE FROM tool_history WHERE tenant_id = $1 AND name = $2`, tenant, name); err != nil {
		return fmt.Errorf("history of %s: %w", name, err)
	}
	for _, r := range rows {
		if err := putHistory(ctx, db, r); err != nil {
			return err
		}
	}
	return nil
}

// SetCurrent makes r the current definition of its tool, whatever was
// before; SetCurrentVersion renumbers the current one, which stays.
func SetCurrent(ctx context.Context, db DB, r Row) error {
	return putCurrent(ctx, db, r, "true")
}

// SetCurrentVersion renumbers the current definition of a tool, which
// stays with its text and vector.
func SetCurrentVersion(ctx context.Context, db DB, tenant, name string, version int) error {
	if _, err := db.Exec(ctx, `UPDATE tools SET version = $3 WHERE tenant_id = $1 AND name = $2`, tenant, name, version); err != nil {
		return fmt.Errorf("tool %s v%d: %w", name, version, err)
	}
	return nil
}

// DeleteCurrent removes a tool's current definition.
func DeleteCurrent(ctx context.Context, db DB, tenant, name string) error {
	if _, err := db.Exec(ctx, `DELETE FROM tools WHERE tenant_id = $1 AND name = $2`, tenant, name); err != nil {
		return fmt.Errorf("tool %s: %w", name, err)
	}
	return nil
}

func vector(r Row) any {
	if r.Embedding == nil {
		return nil
	}
	return pgvector.NewVector(r.Embedding)
}
