package search

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/agentq/agentq/internal/service"
)

// A hybrid search's statement runs its two arms one after the other: the
// vector arm (~3 ms at 100,000 prompts) and then the full-text arm
// (~2.5 ms), and the machine's stalls hit the whole ~7 ms. Run apart,
// each arm is a statement of its own on a connection of its own, both at
// once, and each returns its candidates' rows with its share of the fused
// score (fusedCTE's vecShare and lexShare: the terms of the one
// statement's sum, computed by the same SQL); fuse adds them up and cuts
// the list where the one statement's ORDER BY ... LIMIT cuts, so both
// forms return the same candidates with the same scores
// (TestArmsApartFindWhatOneStatementFinds). The rows' other columns
// (labels, quality) are read by each statement: a change committed
// between the two may show in one arm's rows and not the other's, as it
// would between two searches.
//
// A search running apart holds two connections of the pool it shares
// with the indexer's writers, so only Options.ArmsApart searches at a
// time may, and never more than a quarter of the pool; a search finding
// no slot free runs one statement rather than wait: under load the
// machine's cores are busy anyway and one statement does less work.

// apartSlots returns the slots of n searches running apart, at most a
// quarter of a pool of conns connections (at least one when n > 0); nil
// when none may, or the pool has one connection.
func apartSlots(n int, conns int32) chan struct{} {
	n = min(n, max(1, int(conns)/4))
	if n <= 0 || conns < 2 {
		return nil
	}
	return make(chan struct{}, n)
}

// takeApart takes a slot to run a search's arms apart, if one is free.
func (s *Searcher) takeApart() bool {
	if s.apart == nil {
		return false
	}
	select {
	case s.apart <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Searcher) releaseApart() { <-s.apart }

// fused is what a retrieved row carries of the fusion: its fused score
// (an arm's share of it, run apart) and the full-text coverage (nil from
// the vector arm).
type fused struct {
	rrf        float64
	cov, lrank *float64
}

// fusedKey reads a retrieved row's keys (score unused) and its fusion,
// which fuse adds to.
type fusedKey[T any] func(*T) (candidate, *fused)

// retrieveRows runs the retrieval of one search (see retrieve) and returns
// its rows, read by scan: for a hybrid search with a slot free, by
// running the arms apart and fusing them. When Postgres refuses the
// query's full-text form (queryRefused), a hybrid search answers from its
// vector arm alone and says so in p; a search with no other arm is a bad
// request.
func retrieveRows[T any](ctx context.Context, s *Searcher, p *plan, topK int, kd kind, tune tuning, filter string, named map[string]any, tail string, scan func(pgx.Rows) (T, error), key fusedKey[T]) ([]T, error) {
	rows, err := retrieveArms(ctx, s, *p, topK, kd, tune, filter, named, tail, scan, key)
	if err == nil || !p.mode.lexicalArm() || !queryRefused(err) {
		return rows, err
	}
	if p.mode != Hybrid {
		return nil, service.BadRequest("the query cannot be searched by its words: %s", truncate(err.Error(), 300))
	}
	s.skipped("full_text", skipQueryRejected, p.model, err)
	p.mode, p.degraded = Vector, true
	p.reason = "the full-text search refused the query (" + truncate(err.Error(), 200) + "); results are from vector search alone"
	return retrieveArms(ctx, s, *p, topK, kd, tune, filter, named, tail, scan, key)
}

// retrieveArms is retrieveRows without the fallback.
func retrieveArms[T any](ctx context.Context, s *Searcher, p plan, topK int, kd kind, tune tuning, filter string, named map[string]any, tail string, scan func(pgx.Rows) (T, error), key fusedKey[T]) ([]T, error) {
	collect := func(ctx context.Context, p plan, out *[]T) error {
		return s.retrieve(ctx, p, topK, kd, tune, filter, named, tail, func(r pgx.Rows) error {
			x, err := scan(r)
			*out = append(*out, x)
			return err
		})
	}
	if p.mode != Hybrid || !s.takeApart() {
		var out []T
		err := collect(ctx, p, &out)
		return out, err
	}
	defer s.releaseApart()
	s.runsApart.Add(1)
	var vec, lex []T
	g, gctx := errgroup.WithContext(ctx)
	vp, lp := p, p
	vp.mode, lp.mode = vecShare, lexShare
	g.Go(func() error { return collect(gctx, vp, &vec) })
	g.Go(func() error { return collect(gctx, lp, &lex) })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return fuse(vec, lex, topK, key), nil
}

// fuse adds up the arms' shares of each candidate's fused score (vector
// first, as the one statement adds them), takes its coverage from the
// full-text arm's row, and keeps the topK best, in
// fusedCTE's order: score descending, then tenant, name and version
// ascending, text by bytes. It sorts the candidates' keys, not the rows,
// which are large to copy.
func fuse[T any](vec, lex []T, topK int, key fusedKey[T]) []T {
	type entry struct {
		key candidate
		f   *fused
		row *T
	}
	all := make([]entry, 0, len(vec)+len(lex))
	at := make(map[candidate]int, len(vec)+len(lex))
	add := func(rows []T) {
		for i := range rows {
			c, f := key(&rows[i])
			if j, ok := at[c]; ok {
				all[j].f.rrf += f.rrf
				if all[j].f.cov == nil {
					all[j].f.cov, all[j].f.lrank = f.cov, f.lrank
				}
				continue
			}
			at[c] = len(all)
			all = append(all, entry{c, f, &rows[i]})
		}
	}
	add(vec)
	add(lex)
	slices.SortFunc(all, func(a, b entry) int {
		if c := cmp.Compare(b.f.rrf, a.f.rrf); c != 0 {
			return c
		}
		if c := cmp.Compare(a.key.tenant, b.key.tenant); c != 0 {
			return c
		}
		if c := cmp.Compare(a.key.name, b.key.name); c != 0 {
			return c
		}
		return cmp.Compare(a.key.version, b.key.version)
	})
	out := make([]T, 0, min(topK, len(all)))
	for _, e := range all[:min(topK, len(all))] {
		out = append(out, *e.row)
	}
	return out
}
