package search

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"
)

// A hybrid search's arms are independent until fusion. In one statement
// (the default) Postgres runs them one after the other on one core. With
// Options.ArmsAtOnce they run at once, each on a connection of its own,
// and a third statement fuses what they returned (fusedCTE, unchanged)
// and fetches the rows: a search then waits for the slower arm, not for
// both, when the database has a core for each.
//
// Measured on 2 cores shared by Postgres, NATS and the client (100,000
// prompts, native PostgreSQL 15, agentq bench indexer --search-only, 1,000
// requests): prompt search at concurrency 1, p50 8.4 -> 6.7 ms but p99
// 16.4 -> 19.4 ms; at concurrency 8, 167 -> 142 searches/s. Not the
// default: here the arms compete with everything else for two cores.

// keyTypes are the SQL types of a kind's key columns, for the arrays the
// fusing statement reads the arms' rows from.
var keyTypes = map[string]string{"tenant_id": "text", "id": "text", "version": "int", "name": "text"}

// armRows are the rows one arm returned: its key columns, column by
// column, then its figures (vec: dist, r; lex: lrank, cov, r).
type armRows struct {
	keys    []any // []string or []int32 per key column
	figures [][]float64
	ranks   []int64
}

func newArmRows(kd kind, figures int) *armRows {
	a := &armRows{keys: make([]any, len(kd.keys)), figures: make([][]float64, figures)}
	for i, c := range kd.keys {
		if keyTypes[c] == "int" {
			a.keys[i] = []int32{}
		} else {
			a.keys[i] = []string{}
		}
	}
	return a
}

// scan reads one row: the keys, the figures, the rank.
func (a *armRows) scan(r pgx.Rows) error {
	vals, err := r.Values()
	if err != nil {
		return err
	}
	if len(vals) != len(a.keys)+len(a.figures)+1 {
		return fmt.Errorf("search: an arm returned %d columns, want %d", len(vals), len(a.keys)+len(a.figures)+1)
	}
	for i := range a.keys {
		switch col := a.keys[i].(type) {
		case []int32:
			v, ok := vals[i].(int32)
			if !ok {
				return fmt.Errorf("search: key column %d is %T, want int32", i, vals[i])
			}
			a.keys[i] = append(col, v)
		case []string:
			v, ok := vals[i].(string)
			if !ok {
				return fmt.Errorf("search: key column %d is %T, want string", i, vals[i])
			}
			a.keys[i] = append(col, v)
		}
	}
	for j := range a.figures {
		v, ok := vals[len(a.keys)+j].(float64)
		if !ok {
			return fmt.Errorf("search: figure %d is %T, want float64", j, vals[len(a.keys)+j])
		}
		a.figures[j] = append(a.figures[j], v)
	}
	r64, ok := vals[len(vals)-1].(int64)
	if !ok {
		return fmt.Errorf("search: rank is %T, want int64", vals[len(vals)-1])
	}
	a.ranks = append(a.ranks, r64)
	return nil
}

// armCTE is name AS (the rows of a, as parameters named prefix + a letter),
// with the columns of kd's keys then cols.
func armCTE(name, prefix string, kd kind, a *armRows, cols []string, named map[string]any) string {
	var arrays, names []string
	letter := 'a'
	add := func(v any, typ, col string) {
		p := prefix + string(letter)
		letter++
		named[p] = v
		arrays = append(arrays, fmt.Sprintf("{%s}::%s[]", p, typ))
		names = append(names, col)
	}
	for i, c := range kd.keys {
		add(a.keys[i], keyTypes[c], c)
	}
	for j, c := range cols {
		add(a.figures[j], "float8", c)
	}
	add(a.ranks, "bigint", "r")
	return fmt.Sprintf("%s AS (SELECT * FROM unnest(%s) AS %s(%s))", name, strings.Join(arrays, ", "), name, strings.Join(names, ", "))
}

// retrieveArms is retrieve for a hybrid search, its arms at once: the
// vector arm under its settings on one connection, the full-text arm on
// another, then fusion and tail on a third (one of the two, back in the
// pool). Each statement is prepared per connection as retrieve's is. The
// arms read their own snapshots: a write committed between them can be
// seen by one and not the other, which a search of a changing library
// cannot tell from a write committed just before or after it.
func (s *Searcher) retrieveArms(ctx context.Context, p plan, topK int, kd kind, tune tuning, filter string, named map[string]any, tail string, scan func(pgx.Rows) error) error {
	vecPart, err := vecCTE(kd, filter, p.model, len(p.vec))
	if err != nil {
		return err
	}
	keys := strings.Join(kd.keys, ", ")
	vecSQL, vecArgs := bind("WITH "+vecPart+"\nSELECT "+keys+", dist::float8, r FROM vec", named)
	lexSQL, lexArgs := bind("WITH "+strings.Join(tune.lexCTEs(kd, filter), ",\n")+"\nSELECT "+keys+", lrank::float8, cov::float8, r FROM lex", named)
	vec, lex := newArmRows(kd, 1), newArmRows(kd, 2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return s.query(gctx, p, topK, s.opts.Indexes().method(kd.table), vecSQL, vecArgs, vec.scan)
	})
	g.Go(func() error {
		return s.query(gctx, plan{mode: Lexical}, topK, "", lexSQL, lexArgs, lex.scan)
	})
	if err := g.Wait(); err != nil {
		return err
	}
	fuseNamed := make(map[string]any, len(named)+12)
	for k, v := range named {
		fuseNamed[k] = v
	}
	ctes := []string{
		armCTE("vec", "veccol", kd, vec, []string{"dist"}, fuseNamed),
		armCTE("lex", "lexcol", kd, lex, []string{"lrank", "cov"}, fuseNamed),
		tune.fusedCTE(kd, Hybrid),
	}
	sql, args := bind("WITH "+strings.Join(ctes, ",\n")+tail, fuseNamed)
	return s.query(ctx, plan{mode: Lexical}, topK, "", sql, args, scan)
}
