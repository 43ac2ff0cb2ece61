package search

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Search statements are prepared once per connection and run with a
// generic plan. Parsing, analysing and planning a search's ~9 KB
// statement on every request cost ~2.7 ms of a 13 ms prompt search and of
// a 9 ms tool search (100,000 prompts, native Postgres 15, 2 cores;
// README, "Performance"). A generic plan cannot see its parameters'
// values, so everything the planner chooses by is inlined instead: the
// tenant (so a small tenant's arms read its rows by the btree and a large
// one's walk the HNSW graph and the GIN index, as a custom plan would),
// K and the full-text bound (LIMITs). Only the query's text and vector,
// the request's filters and minimum quality stay parameters; the text
// and the vector move no estimate.
//
// One generic plan of a prompt search holds ~0.65 MB of its backend's
// memory (pg_backend_memory_contexts), and statements are per tenant, so
// each connection keeps at most Options.Prepared of them and deallocates
// the least recently used.

// statements are one connection's prepared search statements, most
// recently used first. A connection is used by one goroutine at a time,
// so it needs no lock.
type statements struct {
	// nonce makes the names unique per connection: the dev database
	// (PGlite) serves every connection from one backend, where two
	// connections preparing one name would collide.
	nonce string
	max   int
	order *list.List // of *prepared
	bySQL map[string]*list.Element
}

type prepared struct{ sql, name string }

// statementsKey holds a connection's statements in its custom data.
const statementsKey = "agentq.search.statements"

// connStatements returns c's statements, creating them on first use.
func connStatements(c *pgx.Conn, max int) (*statements, error) {
	data := c.PgConn().CustomData()
	if st, ok := data[statementsKey].(*statements); ok {
		return st, nil
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("search: statement names: %w", err)
	}
	st := &statements{nonce: hex.EncodeToString(b[:]), max: max, order: list.New(), bySQL: map[string]*list.Element{}}
	data[statementsKey] = st
	return st, nil
}

// prepare returns the name of sql's prepared statement on c, preparing
// it when c has none, and deallocating the least recently used beyond
// max.
func (st *statements) prepare(ctx context.Context, c *pgx.Conn, sql string) (string, error) {
	if e, ok := st.bySQL[sql]; ok {
		st.order.MoveToFront(e)
		return e.Value.(*prepared).name, nil
	}
	// Hashed only here: the name must be short, the lookup above needs
	// no hash of its own.
	sum := sha256.Sum256([]byte(sql))
	name := statementPrefix + st.nonce + "_" + hex.EncodeToString(sum[:12])
	if _, err := c.Prepare(ctx, name, sql); err != nil {
		return "", err
	}
	st.bySQL[sql] = st.order.PushFront(&prepared{sql: sql, name: name})
	for st.order.Len() > st.max {
		if err := st.drop(ctx, c, st.order.Back()); err != nil {
			return "", err
		}
	}
	return name, nil
}

// forget deallocates sql's statement when running it failed because of the
// statement itself, so the next search prepares it again: it is gone from
// the server (26000, say a DISCARD ALL by a pooler), or a change to a
// table it reads changed its result ("cached plan must not change result
// type", 0A000). Other errors (a timeout, the connection lost) leave it.
func (st *statements) forget(ctx context.Context, c *pgx.Conn, sql string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "26000" && pgErr.Code != "0A000" || c.IsClosed() {
		return nil
	}
	if e, ok := st.bySQL[sql]; ok {
		return st.drop(ctx, c, e)
	}
	return nil
}

func (st *statements) drop(ctx context.Context, c *pgx.Conn, e *list.Element) error {
	p := e.Value.(*prepared)
	st.order.Remove(e)
	delete(st.bySQL, p.sql)
	return c.Deallocate(ctx, p.name)
}

// statementPrefix starts every prepared search statement's name.
const statementPrefix = "agentq_search_"

// settingsSQL[n] sets n settings (at most the 4 search uses) for the
// transaction alone: set_config(name, value, true) for each pair of
// arguments. Built once, not per search.
var settingsSQL = func() (out [5]string) {
	for n := 1; n < len(out); n++ {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("set_config($%d, $%d, true)", 2*i+1, 2*i+2)
		}
		out[n] = "SELECT " + strings.Join(parts, ", ")
	}
	return out
}()
