package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/pgvector/pgvector-go"
	"golang.org/x/sync/errgroup"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

// --- phase 2: search ---

// measurement is one kind of request, timed at each concurrency.
type measurement struct {
	name string
	// prepare returns the request function of one run of n requests
	// (queries are generated before the clock starts).
	prepare func(n int) func(ctx context.Context, i int) error
}

// searchReply is the part of a search reply the bench checks.
type searchReply struct {
	Results   []json.RawMessage `json:"results"`
	Retrieval struct {
		Mode     string `json:"mode"`
		Degraded bool   `json:"degraded"`
	} `json:"retrieval"`
}

type searchTally struct{ empty, degraded atomic.Int64 }

func (b *indexerBench) search(ctx context.Context) error {
	defer b.stop()
	nc, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-client"))
	if err != nil {
		return err
	}
	defer nc.Close()
	rng := rand.New(rand.NewPCG(b.o.Seed, 77))
	var mu sync.Mutex // rng is not safe for concurrent use; prepare runs before the clock
	pool := min(b.o.Requests, 500)
	b.say("embedding %d prompt and %d tool queries for the bare kNN", pool, pool)
	pq, pv, err := b.queryVectors(ctx, b.pe, pool, rng, b.c.promptQuery)
	if err != nil {
		return err
	}
	tq, tv, err := b.queryVectors(ctx, b.te, pool, rng, b.c.toolQuery)
	if err != nil {
		return err
	}
	iterative, err := b.iterativeScan(ctx)
	if err != nil {
		return err
	}
	if err := b.maintainIndex(ctx); err != nil {
		return fmt.Errorf("vector index maintenance: %w", err)
	}
	if err := b.recall(ctx, iterative, pv, tv); err != nil {
		return fmt.Errorf("kNN recall: %w", err)
	}
	// The anchor of prompts.get: a responder with no work to do, replying
	// with a body of a prompts.get reply's size.
	echoConn, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-echo"))
	if err != nil {
		return err
	}
	defer echoConn.Close()
	var sample search.GetResponse
	if err := service.Call(ctx, nc, search.GetSubject+"."+b.tenant, search.GetRequest{ID: b.c.ids[0].id}, &sample); err != nil {
		return fmt.Errorf("sample prompts.get: %w", err)
	}
	echoBody, err := json.Marshal(sample)
	if err != nil {
		return err
	}
	echoSubject := "agentq-bench.echo." + b.tenant
	echoSub, err := echoConn.Subscribe(echoSubject, func(m *nats.Msg) { _ = m.Respond(echoBody) })
	if err != nil {
		return err
	}
	defer func() { _ = echoSub.Unsubscribe() }()
	if err := echoConn.Flush(); err != nil {
		return err
	}
	k := b.res
	var promptTally, toolTally searchTally
	call := func(subject string, req any, tally *searchTally) func(context.Context, int) error {
		return func(ctx context.Context, _ int) error {
			if tally == nil {
				var resp search.GetResponse
				if err := service.Call(ctx, nc, subject, req, &resp); err != nil {
					return err
				}
				if resp.Prompt.ID == "" {
					return errors.New("prompts.get: no prompt in the reply")
				}
				return nil
			}
			var resp searchReply
			if err := service.Call(ctx, nc, subject, req, &resp); err != nil {
				return err
			}
			if len(resp.Results) == 0 {
				tally.empty.Add(1)
			}
			if resp.Retrieval.Degraded {
				tally.degraded.Add(1)
			}
			return nil
		}
	}
	gen := func(n int, f func(*rand.Rand) any) []any {
		mu.Lock()
		defer mu.Unlock()
		out := make([]any, n)
		for i := range out {
			out[i] = f(rng)
		}
		return out
	}
	ms := []measurement{
		{"search.prompts", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.PromptsRequest{Query: b.c.promptQuery(r)} })
			return func(ctx context.Context, i int) error {
				return call(search.PromptsSubject+"."+b.tenant, reqs[i], &promptTally)(ctx, i)
			}
		}},
		{"embed.prompts", func(n int) func(context.Context, int) error {
			qs := gen(n, func(r *rand.Rand) any { return b.c.promptQuery(r) })
			return func(ctx context.Context, i int) error { return embedOne(ctx, b.pe, qs[i].(string)) }
		}},
		{"knn.prompts", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("prompts", pv[0])
			return func(ctx context.Context, i int) error {
				return b.bareKNN(ctx, search.EvalPrompts, sql, iterative, k.PromptK, pv[i%len(pv)])
			}
		}},
		{"fulltext.prompts", func(n int) func(context.Context, int) error {
			return func(ctx context.Context, i int) error { return b.bareFullText(ctx, search.EvalPrompts, pq[i%len(pq)]) }
		}},
		{"arms.prompts", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("prompts", pv[0])
			return func(ctx context.Context, i int) error {
				return b.bareArms(ctx, search.EvalPrompts, sql, iterative, k.PromptK, pq[i%len(pq)], pv[i%len(pv)])
			}
		}},
		{"search.tools", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.ToolsRequest{Query: b.c.toolQuery(r)} })
			return func(ctx context.Context, i int) error {
				return call(search.ToolsSubject+"."+b.tenant, reqs[i], &toolTally)(ctx, i)
			}
		}},
		{"embed.tools", func(n int) func(context.Context, int) error {
			qs := gen(n, func(r *rand.Rand) any { return b.c.toolQuery(r) })
			return func(ctx context.Context, i int) error { return embedOne(ctx, b.te, qs[i].(string)) }
		}},
		{"knn.tools", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("tools", tv[0])
			return func(ctx context.Context, i int) error {
				return b.bareKNN(ctx, search.EvalTools, sql, iterative, k.ToolK, tv[i%len(tv)])
			}
		}},
		{"fulltext.tools", func(n int) func(context.Context, int) error {
			return func(ctx context.Context, i int) error { return b.bareFullText(ctx, search.EvalTools, tq[i%len(tq)]) }
		}},
		{"arms.tools", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("tools", tv[0])
			return func(ctx context.Context, i int) error {
				return b.bareArms(ctx, search.EvalTools, sql, iterative, k.ToolK, tq[i%len(tq)], tv[i%len(tv)])
			}
		}},
		{"get", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.GetRequest{ID: b.c.ids[r.IntN(len(b.c.ids))].id} })
			return func(ctx context.Context, i int) error {
				return call(search.GetSubject+"."+b.tenant, reqs[i], nil)(ctx, i)
			}
		}},
		{"get.sql", func(n int) func(context.Context, int) error {
			ids := gen(n, func(r *rand.Rand) any { return b.c.ids[r.IntN(len(b.c.ids))].id })
			return func(ctx context.Context, i int) error { return b.lexical.GetStatement(ctx, b.tenant, ids[i].(string)) }
		}},
		{"get.hot", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.GetRequest{ID: b.c.ids[r.IntN(b.res.HotIDs)].id} })
			return func(ctx context.Context, i int) error {
				return call(search.GetSubject+"."+b.tenant, reqs[i], nil)(ctx, i)
			}
		}},
		{"echo", func(n int) func(context.Context, int) error {
			req, err := json.Marshal(search.GetRequest{ID: b.c.ids[0].id})
			return func(ctx context.Context, _ int) error {
				if err != nil {
					return err
				}
				_, err := nc.RequestWithContext(ctx, echoSubject, req)
				return err
			}
		}},
		{"get.params", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any {
				id := b.c.ids[r.IntN(len(b.c.ids))]
				return search.GetRequest{ID: id.id, Params: id.values}
			})
			return func(ctx context.Context, i int) error {
				return call(search.GetSubject+"."+b.tenant, reqs[i], nil)(ctx, i)
			}
		}},
	}
	if b.o.Warmup > 0 {
		b.say("warming up: %d requests of each kind", b.o.Warmup)
		for _, m := range ms {
			if _, err := runRequests(ctx, b.o.Warmup, slices.Max(b.o.Concurrency), m.prepare(b.o.Warmup)); err != nil {
				return fmt.Errorf("warm-up %s: %w", m.name, err)
			}
		}
	}
	promptTally, toolTally = searchTally{}, searchTally{}
	type key struct {
		conc int
		name string
	}
	rounds := map[key][]Latency{}
	tallies := map[int][4]int64{}
	// 0 among the loads is the open loop.
	loads := slices.Clone(b.o.Concurrency)
	if b.o.Load > 0 {
		loads = append(loads, 0)
	}
	top := slices.Max(b.o.Concurrency)
	for r := range b.o.Rounds {
		for _, c := range loads {
			p0, t0 := [2]int64{promptTally.empty.Load(), promptTally.degraded.Load()}, [2]int64{toolTally.empty.Load(), toolTally.degraded.Load()}
			for _, m := range ms {
				var l Latency
				var err error
				where := fmt.Sprintf("concurrency %d", c)
				if c > 0 {
					l, err = runRequests(ctx, b.o.Requests, c, m.prepare(b.o.Requests))
				} else {
					// Load times what m carried at the highest
					// concurrency in this round.
					done := rounds[key{top, m.name}]
					rate := b.o.Load * done[len(done)-1].Rate
					where = fmt.Sprintf("open loop at %.0f/s", rate)
					l, err = runAtRate(ctx, b.o.Requests, rate, m.prepare(b.o.Requests))
				}
				if err != nil {
					return fmt.Errorf("%s, %s: %w", m.name, where, err)
				}
				rounds[key{c, m.name}] = append(rounds[key{c, m.name}], l)
				b.say("round %d, %s, %-16s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  %7.0f/s  errors %d",
					r+1, where, m.name, l.P50, l.P99, l.Max, l.Rate, l.Errors)
			}
			t := tallies[c]
			t[0] += promptTally.empty.Load() - p0[0]
			t[1] += promptTally.degraded.Load() - p0[1]
			t[2] += toolTally.empty.Load() - t0[0]
			t[3] += toolTally.degraded.Load() - t0[1]
			tallies[c] = t
		}
	}
	for _, c := range loads {
		med := func(name string) Latency { return medianLatency(rounds[key{c, name}]) }
		s := SearchFigures{Concurrency: c,
			SearchPrompts: med("search.prompts"), EmbedPrompts: med("embed.prompts"), KNNPrompts: med("knn.prompts"), FullTextPrompts: med("fulltext.prompts"), ArmsPrompts: med("arms.prompts"),
			SearchTools: med("search.tools"), EmbedTools: med("embed.tools"), KNNTools: med("knn.tools"), FullTextTools: med("fulltext.tools"), ArmsTools: med("arms.tools"),
			Get: med("get"), GetSQL: med("get.sql"), GetParams: med("get.params"), GetHot: med("get.hot"), Echo: med("echo"),
		}
		if c == 0 {
			s.Load = b.o.Load
		}
		s.PromptsRatioP50, s.PromptsRatioP99 = s.SearchPrompts.P50/s.KNNPrompts.P50, s.SearchPrompts.P99/s.KNNPrompts.P99
		s.ToolsRatioP50, s.ToolsRatioP99 = s.SearchTools.P50/s.KNNTools.P50, s.SearchTools.P99/s.KNNTools.P99
		s.PromptsArmsRatioP50, s.PromptsArmsRatioP99 = s.SearchPrompts.P50/s.ArmsPrompts.P50, s.SearchPrompts.P99/s.ArmsPrompts.P99
		s.ToolsArmsRatioP50, s.ToolsArmsRatioP99 = s.SearchTools.P50/s.ArmsTools.P50, s.SearchTools.P99/s.ArmsTools.P99
		t := tallies[c]
		s.EmptyPrompts, s.DegradedPrompts, s.EmptyTools, s.DegradedTools = int(t[0]), int(t[1]), int(t[2]), int(t[3])
		b.res.Search = append(b.res.Search, s)
	}
	return nil
}

// queryVectors generates n queries and embeds them with e.
func (b *indexerBench) queryVectors(ctx context.Context, e embed.Embedder, n int, r *rand.Rand, gen func(*rand.Rand) string) ([]string, []pgvector.Vector, error) {
	qs := make([]string, n)
	for i := range qs {
		qs[i] = gen(r)
	}
	vecs, err := e.Embed(ctx, qs)
	if err != nil {
		return nil, nil, err
	}
	out := make([]pgvector.Vector, n)
	for i, v := range vecs {
		out[i] = pgvector.NewVector(v)
	}
	return qs, out, nil
}

func (b *indexerBench) iterativeScan(ctx context.Context) (bool, error) {
	parts := strings.SplitN(b.res.PGVector, ".", 3)
	if len(parts) < 2 {
		return false, fmt.Errorf("pgvector version %q", b.res.PGVector)
	}
	x, _ := strconv.Atoi(parts[0])
	y, _ := strconv.Atoi(parts[1])
	return x > 0 || y >= 8, nil
}

// knnSQL is the vector arm of search alone: the same filter (tenant and
// _global; for prompts the version a consumer gets, for tools not
// quarantined), model literal, cast and ORDER BY ... LIMIT K.
func (b *indexerBench) knnSQL(table string, v pgvector.Vector) string {
	dim := len(v.Slice())
	model, filter, keys := b.res.PromptModel, `AND a.current`, "a.tenant_id, a.id, a.version"
	if table == "tools" {
		model, filter, keys = b.res.ToolModel, `AND NOT EXISTS (SELECT 1 FROM index_tool_health h
                    WHERE h.tenant_id IN ($1, a.tenant_id) AND h.tool_name = a.name
                      AND h.quarantined AND (h.expires_at IS NULL OR h.expires_at > now()))`, "a.tenant_id, a.name"
	}
	dist := fmt.Sprintf("a.embedding::halfvec(%d) <=> $2::halfvec(%d)", dim, dim)
	return fmt.Sprintf(`SELECT %s, %s AS dist FROM %s a
WHERE a.embedding_model = '%s' AND a.embedding_dim = %d AND a.tenant_id IN ($1, '_global') %s
ORDER BY %s LIMIT $3`, keys, dist, table, strings.ReplaceAll(model, "'", "''"), dim, filter, dist)
}

// maintainIndex runs the indexer's index maintenance (search.MaintainIndexes)
// now, rather than at its next check: search is measured against prompts'
// IVFFlat index as the indexer keeps it for these rows. While an indexer
// copy runs it, it waits.
func (b *indexerBench) maintainIndex(ctx context.Context) error {
	emb := search.Embedders{Prompts: b.pe, Tools: b.te}
	for {
		m, err := search.MaintainIndexes(ctx, b.d.Pool, emb, b.searchOpts.Indexes())
		if err != nil {
			return err
		}
		if !m.OtherCopy {
			b.res.PromptLists = m.Lists
			if m.Rebuilt {
				b.res.PromptRebuild = &IndexRebuild{Rows: m.Rows, From: m.Before, To: m.Lists, Seconds: m.Took.Seconds()}
				b.say("rebuilt prompts' IVFFlat index for %d rows: %d lists (was %d), in %s", m.Rows, m.Lists, m.Before, m.Took.Round(time.Millisecond))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// bareKNN runs the kNN statement as search runs its statement: exec mode
// (a custom plan), in a read-only transaction with the vector index's
// settings set locally.
func (b *indexerBench) bareKNN(ctx context.Context, kind search.EvalKind, sql string, iterative bool, k int, v pgvector.Vector) error {
	return b.knnTx(ctx, kind, iterative, k, false, func(tx pgx.Tx) error {
		return drain(tx.Query(ctx, sql, pgx.QueryExecModeExec, b.tenant, v, k))
	})
}

// knnTx runs f in a read-only transaction with the settings search runs a
// kNN query of kind for k candidates under (search.KNNSettings), and with
// index scans off when exact (the kNN statement then scans and sorts every
// served row).
func (b *indexerBench) knnTx(ctx context.Context, kind search.EvalKind, iterative bool, k int, exact bool, f func(pgx.Tx) error) error {
	set := search.KNNSettings(kind, k, b.searchOpts, iterative)
	if exact {
		set = append(set, "enable_indexscan", "off")
	}
	return pgx.BeginTxFunc(ctx, b.d.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, search.SettingsSQL(set), set...); err != nil {
			return err
		}
		return f(tx)
	})
}

// recallQueries bounds the queries recall is measured over: each also
// runs an exact scan of every served row.
const recallQueries = 200

// recall measures the kNN statement's recall@K against the same statement
// with index scans disabled (an exact scan and sort), over the first
// query vectors of each kind.
func (b *indexerBench) recall(ctx context.Context, iterative bool, pv, tv []pgvector.Vector) error {
	n := min(recallQueries, len(pv), len(tv))
	b.say("kNN recall@K against exact scans, %d queries of each kind", n)
	one := func(table string, k int, vs []pgvector.Vector) (float64, error) {
		kind := search.EvalPrompts
		if table == "tools" {
			kind = search.EvalTools
		}
		if n == 0 {
			return 0, nil
		}
		sql := b.knnSQL(table, vs[0])
		total := 0.0
		for _, v := range vs[:n] {
			approx, err := b.knnKeys(ctx, kind, sql, iterative, k, v, false)
			if err != nil {
				return 0, err
			}
			exact, err := b.knnKeys(ctx, kind, sql, iterative, k, v, true)
			if err != nil {
				return 0, err
			}
			if len(exact) == 0 {
				total++
				continue
			}
			hit := 0
			for key := range exact {
				if approx[key] {
					hit++
				}
			}
			total += float64(hit) / float64(len(exact))
		}
		return total / float64(n), nil
	}
	var err error
	b.res.Recall.Queries = n
	if b.res.Recall.Prompts, err = one("prompts", b.res.PromptK, pv); err != nil {
		return err
	}
	b.res.Recall.Tools, err = one("tools", b.res.ToolK, tv)
	return err
}

// knnKeys returns the keys the kNN statement returns, as bareKNN runs it,
// or with index scans off: the exact answer.
func (b *indexerBench) knnKeys(ctx context.Context, kind search.EvalKind, sql string, iterative bool, k int, v pgvector.Vector, exact bool) (map[string]bool, error) {
	keys := map[string]bool{}
	err := b.knnTx(ctx, kind, iterative, k, exact, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, pgx.QueryExecModeExec, b.tenant, v, k)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			keys[fmt.Sprintf("%#v", vals[:len(vals)-1])] = true // every column but the distance
		}
		return rows.Err()
	})
	return keys, err
}

// bareFullText runs search's full-text arm alone (search.FullTextArm:
// the statement search runs, in lexical mode) as search runs it.
func (b *indexerBench) bareFullText(ctx context.Context, kind search.EvalKind, q string) error {
	_, err := b.lexical.FullTextArm(ctx, kind, b.tenant, q)
	return err
}

// embedOne embeds one query with e, as a search does on a cache miss:
// the first thing a search waits for, before either arm can run.
func embedOne(ctx context.Context, e embed.Embedder, q string) error {
	vecs, err := e.Embed(ctx, []string{q})
	if err == nil && len(vecs) != 1 {
		err = fmt.Errorf("%d vectors for 1 query", len(vecs))
	}
	return err
}

// bareArms runs the bare kNN statement and the bare full-text arm of one
// query at once, each on a connection of its own, and returns when both
// have: the database work of a hybrid search whose arms run apart, with
// nothing of the search around it (no fusion, labels, quality, JSON or
// NATS), so search over it is what agentq adds.
func (b *indexerBench) bareArms(ctx context.Context, kind search.EvalKind, sql string, iterative bool, k int, q string, v pgvector.Vector) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.bareKNN(gctx, kind, sql, iterative, k, v) })
	g.Go(func() error { return b.bareFullText(gctx, kind, q) })
	return g.Wait()
}

func drain(rows pgx.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}
