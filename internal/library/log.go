package library

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
)

// Entry is one prompt.created or prompt.activated of a prompt id as the
// indexer logged it (migration 00014): what the event asked, at its stream
// sequence. The log lets the indexer decide a prompt id's events again in
// stream order when one arrives after a later one was applied.
type Entry struct {
	Tenant, PromptID string
	StreamSeq        uint64
	EventID          string
	Activate         bool
	// Version is the version asked for (0: the next free one) of a
	// create, the version labelled of an activation.
	Version int
	Label   string // an activation's
	// Input is a create's prompt as given; nil when read back while the
	// version row its event created holds it (see Stored).
	Input *Prompt
	At    time.Time
}

// QueueLog queues the insert of e in b.
func QueueLog(b *pgx.Batch, e Entry) error {
	var input any
	if e.Input != nil {
		raw, err := json.Marshal(e.Input)
		if err != nil {
			return fmt.Errorf("encode log input of %s: %w", e.EventID, err)
		}
		input = string(raw) // as text: see insertArgs
	}
	kind, version, label := "create", any(nil), any(nil)
	if e.Activate {
		kind, label = "activate", e.Label
	}
	if e.Version > 0 {
		version = e.Version
	}
	b.Queue(`INSERT INTO prompt_log (tenant_id, prompt_id, stream_seq, event_id, kind, version, label, input, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		e.Tenant, e.PromptID, int64(e.StreamSeq), e.EventID, kind, version, label, input, e.At.UTC())
	return nil
}

// ReadLog returns the log of one prompt id, in stream order.
func ReadLog(ctx context.Context, db DB, tenant, id string) ([]Entry, error) {
	rows, err := db.Query(ctx, `SELECT stream_seq, event_id, kind = 'activate', coalesce(version, 0), coalesce(label, ''), input, at
FROM prompt_log WHERE tenant_id = $1 AND prompt_id = $2 ORDER BY stream_seq`, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("read log of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		e := Entry{Tenant: tenant, PromptID: id}
		var seq int64
		var input []byte
		if err := r.Scan(&seq, &e.EventID, &e.Activate, &e.Version, &e.Label, &input, &e.At); err != nil {
			return e, err
		}
		e.StreamSeq, e.At = uint64(seq), e.At.UTC()
		if len(input) > 0 {
			e.Input = new(Prompt)
			if err := json.Unmarshal(input, e.Input); err != nil {
				return e, fmt.Errorf("decode log input of %s: %w", e.EventID, err)
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read log of %s: %w", id, err)
	}
	return out, nil
}

// Unlog deletes the entries of events (of tenant) from the log, so they
// can be logged again at another sequence.
func Unlog(ctx context.Context, db DB, tenant string, events []string) error {
	if len(events) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `DELETE FROM prompt_log WHERE tenant_id = $1 AND event_id = ANY($2)`, tenant, events); err != nil {
		return fmt.Errorf("unlog: %w", err)
	}
	return nil
}

// KeepInput stores a create's input in the log: its event no longer has
// a version row that holds it.
func KeepInput(ctx context.Context, db DB, tenant, eventID string, p Prompt) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode log input of %s: %w", eventID, err)
	}
	if _, err := db.Exec(ctx, `UPDATE prompt_log SET input = $3 WHERE tenant_id = $1 AND event_id = $2`, tenant, eventID, string(raw)); err != nil {
		return fmt.Errorf("keep log input of %s: %w", eventID, err)
	}
	return nil
}

// Stored is a version row as the log needs it: the prompt, the event that
// created it, and the model of its vector ("" without one).
type Stored struct {
	Prompt
	EventID   string
	StreamSeq uint64
	Model     string
	Dim       int
}

// Versions returns every version of one prompt id, oldest first.
func Versions(ctx context.Context, db DB, tenant, id string) ([]Stored, error) {
	rows, err := db.Query(ctx, `SELECT `+Columns+`, p.event_id, p.stream_seq, p.embedding_model, p.embedding_dim
FROM prompts p WHERE p.tenant_id = $1 AND p.id = $2 ORDER BY p.version`, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("versions of %s: %w", id, err)
	}
	defer rows.Close()
	var out []Stored
	for rows.Next() {
		var s Stored
		var seq int64
		if s.Prompt, err = Scan(rows, &s.EventID, &seq, &s.Model, &s.Dim); err != nil {
			return nil, fmt.Errorf("versions of %s: %w", id, err)
		}
		s.StreamSeq = uint64(seq)
		s.Labels = nil
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("versions of %s: %w", id, err)
	}
	return out, nil
}

// Renumber is a version row that keeps its event, text and vector under
// another version number (and so another hash).
type Renumber struct {
	EventID string
	Version int
	Hash    string
}

// DeleteVersions deletes versions of one prompt id.
func DeleteVersions(ctx context.Context, db DB, tenant, id string, versions []int) error {
	if len(versions) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `DELETE FROM prompts WHERE tenant_id = $1 AND id = $2 AND version = ANY($3)`, tenant, id, versions); err != nil {
		return fmt.Errorf("delete versions of %s: %w", id, err)
	}
	return nil
}

// RenumberVersions gives the rows of one prompt id created by the events
// named in moves their new version and hash, keeping their text and
// vector: they are read, deleted and inserted again, so two rows may swap
// numbers. current is left to Refresh.
func RenumberVersions(ctx context.Context, db DB, tenant, id string, moves []Renumber) error {
	if len(moves) == 0 {
		return nil
	}
	events := make([]string, len(moves))
	for i, m := range moves {
		events[i] = m.EventID
	}
	rows, err := db.Query(ctx, `SELECT `+Columns+`, p.event_id, p.stream_seq, p.embedding, p.embedding_model
FROM prompts p WHERE p.tenant_id = $1 AND p.id = $2 AND p.event_id = ANY($3)`, tenant, id, events)
	if err != nil {
		return fmt.Errorf("renumber versions of %s: %w", id, err)
	}
	byEvent := map[string]Row{}
	for rows.Next() {
		var r Row
		var seq int64
		var vec *pgvector.Vector
		if r.Prompt, err = Scan(rows, &r.EventID, &seq, &vec, &r.Model); err != nil {
			rows.Close()
			return fmt.Errorf("renumber versions of %s: %w", id, err)
		}
		r.StreamSeq, r.Labels = uint64(seq), nil
		if vec != nil {
			r.Embedding = vec.Slice()
		}
		byEvent[r.EventID] = r
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("renumber versions of %s: %w", id, err)
	}
	if len(byEvent) != len(moves) {
		return fmt.Errorf("renumber versions of %s: %d of %d rows found", id, len(byEvent), len(moves))
	}
	if _, err := db.Exec(ctx, `DELETE FROM prompts WHERE tenant_id = $1 AND id = $2 AND event_id = ANY($3)`, tenant, id, events); err != nil {
		return fmt.Errorf("renumber versions of %s: %w", id, err)
	}
	for _, m := range moves {
		r := byEvent[m.EventID]
		r.Version, r.Hash = m.Version, m.Hash
		if _, err := Insert(ctx, db, r); err != nil {
			return err
		}
	}
	return nil
}

// Label is where one label of a prompt id points, and the activation that
// moved it there.
type Label struct {
	Label     string
	Version   int
	StreamSeq uint64
	EventID   string
	At        time.Time
}

// ReplaceLabels makes labels the labels of one prompt id, and nothing
// else. current is left to Refresh.
func ReplaceLabels(ctx context.Context, db DB, tenant, id string, labels []Label) error {
	if _, err := db.Exec(ctx, `DELETE FROM prompt_labels WHERE tenant_id = $1 AND prompt_id = $2`, tenant, id); err != nil {
		return fmt.Errorf("labels of %s: %w", id, err)
	}
	for _, l := range labels {
		if _, err := db.Exec(ctx, `INSERT INTO prompt_labels (tenant_id, prompt_id, label, version, stream_seq, event_id, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)`, tenant, id, l.Label, l.Version, int64(l.StreamSeq), l.EventID, l.At.UTC()); err != nil {
			return fmt.Errorf("label %s of %s: %w", l.Label, id, err)
		}
	}
	return nil
}

// ErrUnlogged is returned for a logged create whose input is neither in
// the log nor in a version row: the log and the rows disagree.
var ErrUnlogged = errors.New("create without its input")
