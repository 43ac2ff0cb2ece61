// Package registry is agentq's tool registry: one current definition per
// tenant and tool name, every earlier definition kept as history by
// version. Registering an unchanged definition is a no-op; a changed one is
// a new version (and a new embedding). The indexer (internal/indexer)
// applies tool.registered with it; search (internal/search) reads the
// current definitions.
package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tool is one definition of a tool.
type Tool struct {
	Tenant       string          `json:"tenant"`
	Name         string          `json:"name"`
	Version      int             `json:"version"`
	Hash         string          `json:"content_hash"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	Server       string          `json:"server,omitempty"`
	Tags         []string        `json:"tags,omitempty"`
	RegisteredAt time.Time       `json:"registered_at"`
}

// Hash is a definition's content hash: lowercase hex SHA-256 of the JSON
// of {name, description, input_schema, server, tags}, with the schema's
// object keys sorted and tags sorted, so the same definition written
// differently hashes the same.
func Hash(name, description string, inputSchema json.RawMessage, server string, tags []string) (string, error) {
	var schema any
	if len(bytes.TrimSpace(inputSchema)) > 0 {
		d := json.NewDecoder(bytes.NewReader(inputSchema))
		d.UseNumber()
		if err := d.Decode(&schema); err != nil {
			return "", fmt.Errorf("input_schema: %w", err)
		}
	}
	t := append([]string{}, tags...)
	sort.Strings(t)
	// encoding/json writes map keys sorted: a canonical form.
	b, err := json.Marshal(struct {
		Name        string   `json:"name"`
		Description string   `json:"description"`
		InputSchema any      `json:"input_schema"`
		Server      string   `json:"server"`
		Tags        []string `json:"tags"`
	}{name, description, schema, server, t})
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// DB is what the store needs: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNotFound is returned for a tool that is not registered.
var ErrNotFound = errors.New("tool not found")

// Row is a definition as stored.
type Row struct {
	Tool
	EventID   string
	StreamSeq uint64
	Embedding []float32
	Model     string
}

// Head returns the current version and hash of a tool, or ErrNotFound.
func Head(ctx context.Context, db DB, tenant, name string) (version int, hash string, err error) {
	err = db.QueryRow(ctx, `SELECT version, hash FROM tools WHERE tenant_id = $1 AND name = $2`, tenant, name).Scan(&version, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", ErrNotFound
	}
	return version, hash, err
}

// Put makes r the current definition of its tool unless a registration
// later in the stream already is (compare-and-set on the stream
// sequence), and adds it to the history. A version already in the history
// is left as it is (a repeat of the same put).
func Put(ctx context.Context, db DB, r Row) error {
	if err := putHistory(ctx, db, r); err != nil {
		return err
	}
	return putCurrent(ctx, db, r, "tools.stream_seq < excluded.stream_seq")
}

func putHistory(ctx context.Context, db DB, r Row) error {
	tags := r.Tags
	if tags == nil {
		tags = []string{}
	}
	if _, err := db.Exec(ctx, `
INSERT INTO tool_history (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (tenant_id, name, version) DO NOTHING`,
		r.Tenant, r.Name, r.Version, r.Hash, r.Description, nullJSON(r.InputSchema), r.Server, tags, r.RegisteredAt.UTC(),
		r.EventID, int64(r.StreamSeq)); err != nil {
		return fmt.Errorf("tool history %s v%d: %w", r.Name, r.Version, err)
	}
	return nil
}

// putCurrent upserts the current row of r's tool where the condition on
// the existing row (tools) and the new one (excluded) holds.
func putCurrent(ctx context.Context, db DB, r Row, where string) error {
	tags := r.Tags
	if tags == nil {
		tags = []string{}
	}
	if _, err := db.Exec(ctx, `
INSERT INTO tools (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq,
                   embedding, embedding_model, embedding_dim)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (tenant_id, name) DO UPDATE
SET version = excluded.version, hash = excluded.hash, description = excluded.description,
    input_schema = excluded.input_schema, server = excluded.server, tags = excluded.tags,
    registered_at = excluded.registered_at, event_id = excluded.event_id, stream_seq = excluded.stream_seq,
    embedding = excluded.embedding, embedding_model = excluded.embedding_model, embedding_dim = excluded.embedding_dim
WHERE `+where,
		r.Tenant, r.Name, r.Version, r.Hash, r.Description, nullJSON(r.InputSchema), r.Server, tags, r.RegisteredAt.UTC(),
		r.EventID, int64(r.StreamSeq), vector(r), r.Model, len(r.Embedding)); err != nil {
		return fmt.Errorf("tool %s v%d: %w", r.Name, r.Version, err)
	}
	return nil
}

// Columns is the select list Scan reads, for queries over tools t.
const Columns = `t.tenant_id, t.name, t.version, t.hash, t.description, t.input_schema, t.server, t.tags, t.registered_at`

// Scan reads a row selected with Columns, then more.
func Scan(row pgx.Row, more ...any) (Tool, error) {
	var t Tool
	var schema []byte
	dest := append([]any{&t.Tenant, &t.Name, &t.Version, &t.Hash, &t.Description, &schema, &t.Server, &t.Tags, &t.RegisteredAt}, more...)
	if err := row.Scan(dest...); err != nil {
		return t, err
	}
	if len(schema) > 0 && string(schema) != "null" {
		t.InputSchema = schema
	}
	t.RegisteredAt = t.RegisteredAt.UTC()
	return t, nil
}

// Get returns the current definition of a tool, or ErrNotFound.
func Get(ctx context.Context, db DB, tenant, name string) (Tool, error) {
	t, err := Scan(db.QueryRow(ctx, `SELECT `+Columns+` FROM tools t WHERE t.tenant_id = $1 AND t.name = $2`, tenant, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	return t, err
}

// History returns every definition of a tool, oldest first.
func History(ctx context.Context, db DB, tenant, name string) ([]Tool, error) {
	rows, err := db.Query(ctx, `SELECT `+Columns+` FROM tool_history t WHERE t.tenant_id = $1 AND t.name = $2 ORDER BY t.version`, tenant, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Tool
	for rows.Next() {
		t, err := Scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Reset deletes tenant's tools, history and log ("" = every tenant).
func Reset(ctx context.Context, db DB, tenant string) error {
	for _, table := range []string{"tool_history", "tools", "tool_log"} {
		if _, err := db.Exec(ctx, `DELETE FROM `+table+` WHERE $1 = '' OR tenant_id = $1`, tenant); err != nil {
			return fmt.Errorf("reset %s: %w", table, err)
		}
	}
	return nil
}

func nullJSON(b json.RawMessage) any {
	if len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	return string(b) // as text: []byte would be sent as bytea in the exec protocol
}
