package library

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgvector/pgvector-go"
)

// DB is what the store needs: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Row is a version as stored: the prompt, where it came from, and its
// vector.
type Row struct {
	Prompt
	EventID   string
	StreamSeq uint64
	Embedding []float32 // nil: not embedded (yet)
	Model     string
}

// ErrNotFound is returned when a prompt, version or label does not exist.
var ErrNotFound = errors.New("not found")

// Insert stores r unless (tenant, id, version) exists; it reports whether it
// did. The caller decides what an existing version means (Get and compare
// hashes).
func Insert(ctx context.Context, db DB, r Row) (bool, error) {
	args, err := insertArgs(r)
	if err != nil {
		return false, err
	}
	var inserted bool
	if err := db.QueryRow(ctx, insertSQL, args...).Scan(&inserted); err != nil {
		return false, fmt.Errorf("insert prompt %s@%d: %w", r.ID, r.Version, err)
	}
	return inserted, nil
}

// QueueInsert queues Insert of r in b; when b is sent, done learns whether
// r was stored, and its error becomes the batch's. Queued inserts travel
// in one round trip, and the server runs them in order, each seeing those
// before it.
func QueueInsert(b *pgx.Batch, r Row, done func(inserted bool) error) error {
	args, err := insertArgs(r)
	if err != nil {
		return err
	}
	b.Queue(insertSQL, args...).QueryRow(func(row pgx.Row) error {
		var inserted bool
		if err := row.Scan(&inserted); err != nil {
			return fmt.Errorf("insert prompt %s@%d: %w", r.ID, r.Version, err)
		}
		return done(inserted)
	})
	return nil
}

// insertSQL is one statement: the insert, and when the new row is the
// served one, the update that takes the version served before out of the
// served set (found through prompts_current). A new row that is not
// served (a production label pins another, or a newer version exists)
// changes nothing else. What Refresh does in general, for the one case an
// insert can make, in one round trip and without reading every version of
// the id.
const insertSQL = `
WITH ins AS (
  INSERT INTO prompts (tenant_id, id, version, hash, type, name, description, content, parameters,
                       tags, author, metadata, created_at, event_id, stream_seq, embedding, embedding_model, embedding_dim, current)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
          -- Served at once when it is the newest and no production label
          -- pins another: the row enters the partial vector index once,
          -- at insert, not again through an update.
          NOT EXISTS (SELECT 1 FROM prompt_labels l WHERE l.tenant_id = $1 AND l.prompt_id = $2 AND l.label = 'production')
          AND $3 > coalesce((SELECT max(x.version) FROM prompts x WHERE x.tenant_id = $1 AND x.id = $2), 0))
  ON CONFLICT (tenant_id, id, version) DO NOTHING
  RETURNING current),
old AS (
  UPDATE prompts p SET current = false FROM ins
  WHERE ins.current AND p.tenant_id = $1 AND p.id = $2 AND p.current AND p.version <> $3)
SELECT EXISTS (SELECT 1 FROM ins)`

func insertArgs(r Row) ([]any, error) {
	params, err := json.Marshal(nonNilParams(r.Parameters))
	if err != nil {
		return nil, fmt.Errorf("encode parameters: %w", err)
	}
	// JSON goes as text: []byte would be sent as bytea in the exec and
	// simple protocols (PGlite).
	var meta any
	if len(r.Metadata) > 0 {
		meta = string(r.Metadata)
	}
	var vec any
	if r.Embedding != nil {
		vec = pgvector.NewVector(r.Embedding)
	}
	return []any{r.Tenant, r.ID, r.Version, r.Hash, r.Type, r.Name, r.Description, r.Content, string(params),
		nonNilTags(r.Tags), r.Author, meta, r.CreatedAt.UTC(), r.EventID, int64(r.StreamSeq), vec, r.Model, len(r.Embedding)}, nil
}

// Ref names a version of a prompt; Version 0 names the newest.
type Ref struct {
	Tenant, ID string
	Version    int
}

// Found is a version that exists, its hash and its parameter
// declaration: a create of the same content with another declaration is
// not the same version (DiffParams).
type Found struct {
	Version int
	Hash    string
	Params  []Param
}

// Lookup finds the versions refs name, in one query: the map holds those
// that exist (for Version 0, the newest version, if the prompt has any).
func Lookup(ctx context.Context, db DB, refs []Ref) (map[Ref]Found, error) {
	out := make(map[Ref]Found, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	tenants, ids, versions := make([]string, len(refs)), make([]string, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		tenants[i], ids[i], versions[i] = r.Tenant, r.ID, int32(r.Version)
	}
	// Each ref is one backward step of the primary key from its version
	// (or the top): the first row is the version itself when it exists.
	rows, err := db.Query(ctx, `
SELECT u.n, x.version, x.hash, x.parameters
FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS u(t, i, v, n)
CROSS JOIN LATERAL (
  SELECT p.version, p.hash, p.parameters FROM prompts p
  WHERE p.tenant_id = u.t AND p.id = u.i AND p.version <= CASE WHEN u.v = 0 THEN 2147483647 ELSE u.v END
  ORDER BY p.version DESC LIMIT 1) x`, tenants, ids, versions)
	if err != nil {
		return nil, fmt.Errorf("look up prompt versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		var f Found
		var params []byte
		if err := rows.Scan(&n, &f.Version, &f.Hash, &params); err != nil {
			return nil, fmt.Errorf("look up prompt versions: %w", err)
		}
		r := refs[n-1]
		if r.Version != 0 && r.Version != f.Version {
			continue
		}
		if len(params) > 0 {
			if err := json.Unmarshal(params, &f.Params); err != nil {
				return nil, fmt.Errorf("decode parameters of %s@%d: %w", r.ID, f.Version, err)
			}
		}
		out[r] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up prompt versions: %w", err)
	}
	return out, nil
}

// Created returns the hash of one version and the stream sequence of the
// event that created it, or ErrNotFound.
func Created(ctx context.Context, db DB, tenant, id string, version int) (string, uint64, error) {
	var h string
	var seq int64
	err := db.QueryRow(ctx, `SELECT hash, stream_seq FROM prompts WHERE tenant_id = $1 AND id = $2 AND version = $3`,
		tenant, id, version).Scan(&h, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, ErrNotFound
	}
	return h, uint64(seq), err
}

// Columns is the select list Scan reads, for queries over prompts p.
const Columns = `p.tenant_id, p.id, p.version, p.hash, p.type, p.name, p.description, p.content, p.parameters,
p.tags, p.author, p.metadata, p.created_at,
coalesce((SELECT array_agg(l.label ORDER BY l.label) FROM prompt_labels l
          WHERE l.tenant_id = p.tenant_id AND l.prompt_id = p.id AND l.version = p.version), '{}')`

// Scan reads a row selected with Columns (plus any columns after them,
// given in more).
func Scan(row pgx.Row, more ...any) (Prompt, error) {
	p, params, err := ScanLazy(row, more...)
	if err != nil {
		return p, err
	}
	return p, p.DecodeParameters(params)
}

// ScanLazy is Scan leaving the parameters undecoded: they are returned as
// stored, for DecodeParameters. Search reads many candidates and returns
// a few; decoding every candidate's parameters was a tenth of its CPU.
func ScanLazy(row pgx.Row, more ...any) (Prompt, []byte, error) {
	var p Prompt
	var params []byte
	var meta []byte
	dest := append([]any{&p.Tenant, &p.ID, &p.Version, &p.Hash, &p.Type, &p.Name, &p.Description, &p.Content, &params,
		&p.Tags, &p.Author, &meta, &p.CreatedAt, &p.Labels}, more...)
	if err := row.Scan(dest...); err != nil {
		return p, nil, err
	}
	if len(meta) > 0 && string(meta) != "null" {
		p.Metadata = meta
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, params, nil
}

// DecodeParameters sets p's parameters from their stored JSON (ScanLazy).
func (p *Prompt) DecodeParameters(params []byte) error {
	if len(params) == 0 {
		return nil
	}
	if err := json.Unmarshal(params, &p.Parameters); err != nil {
		return fmt.Errorf("decode parameters of %s@%d: %w", p.ID, p.Version, err)
	}
	return nil
}

// Get returns one version of tenant's prompt, or ErrNotFound.
func Get(ctx context.Context, db DB, tenant, id string, version int) (Prompt, error) {
	p, err := Scan(db.QueryRow(ctx, `SELECT `+Columns+` FROM prompts p WHERE p.tenant_id = $1 AND p.id = $2 AND p.version = $3`,
		tenant, id, version))
	if errors.Is(err, pgx.ErrNoRows) {
		return p, ErrNotFound
	}
	return p, err
}

// Refresh marks which version of a prompt is current, the one a consumer
// gets: labelled production, else the latest (migration 00009). Insert and
// SetLabel call it; other writers of prompts or labels must too, in the
// same transaction.
func Refresh(ctx context.Context, db DB, tenant, id string) error {
	_, err := db.Exec(ctx, `
UPDATE prompts p SET current = (p.version = s.v)
FROM (SELECT coalesce(
        (SELECT l.version FROM prompt_labels l WHERE l.tenant_id = $1 AND l.prompt_id = $2 AND l.label = 'production'),
        (SELECT max(x.version) FROM prompts x WHERE x.tenant_id = $1 AND x.id = $2)) AS v) s
WHERE p.tenant_id = $1 AND p.id = $2 AND p.current IS DISTINCT FROM (p.version = s.v)`, tenant, id)
	if err != nil {
		return fmt.Errorf("current version of %s: %w", id, err)
	}
	return nil
}

// SetLabel points label at version unless a newer prompt.activated (by
// stream sequence) already moved it; it reports whether it applied.
func SetLabel(ctx context.Context, db DB, tenant, promptID, label string, version int, seq uint64, eventID string, at time.Time) (bool, error) {
	tag, err := db.Exec(ctx, `
INSERT INTO prompt_labels (tenant_id, prompt_id, label, version, stream_seq, event_id, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tenant_id, prompt_id, label) DO UPDATE
SET version = excluded.version, stream_seq = excluded.stream_seq, event_id = excluded.event_id, updated_at = excluded.updated_at
WHERE prompt_labels.stream_seq < excluded.stream_seq`,
		tenant, promptID, label, version, int64(seq), eventID, at.UTC())
	if err != nil {
		return false, fmt.Errorf("set label %s of %s: %w", label, promptID, err)
	}
	if tag.RowsAffected() != 1 {
		return false, nil
	}
	if label == "production" {
		return true, Refresh(ctx, db, tenant, promptID)
	}
	return true, nil
}

// LabelsOf returns the labels pointing at one version, sorted.
func LabelsOf(ctx context.Context, db DB, tenant, id string, version int) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT label FROM prompt_labels WHERE tenant_id = $1 AND prompt_id = $2 AND version = $3 ORDER BY label`,
		tenant, id, version)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Reset deletes tenant's prompts, labels and log ("" = every tenant), for
// a rebuild.
func Reset(ctx context.Context, db DB, tenant string) error {
	for _, table := range []string{"prompt_labels", "prompts", "prompt_log"} {
		if _, err := db.Exec(ctx, `DELETE FROM `+table+` WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	return nil
}

func nonNilParams(p []Param) []Param {
	if p == nil {
		return []Param{}
	}
	return p
}

func nonNilTags(t []string) []string {
	if t == nil {
		return []string{}
	}
	return t
}
