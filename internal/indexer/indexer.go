// Package indexer is agentq's indexer consumer: it applies prompt.created,
// prompt.activated and tool.registered to the prompt library
// (internal/library) and the tool registry (internal/registry), embeds what
// it stores, keeps a read model of other consumers' results for search
// (quality.changed, tool.degraded / quarantined / recovered), publishes
// prompt.indexed, tool.indexed and indexer.rejected, and serves search
// (internal/search) over NATS request/reply.
//
// Decisions that depend on what came before (the next free version, which
// of two conflicting creates won, whether a definition is unchanged,
// whether an activated version existed) are taken in stream order, whatever
// order copies commit events in: every such event is logged at its stream
// sequence, and one that arrives after a later one makes the indexer decide
// its key's events again (see order.go). So replay, which applies the
// history in stream order, gives the state live processing gave.
package indexer

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/search"
)

// Options configures the indexer.
type Options struct {
	// Consumer names the durable consumer and the inbox. Default "indexer".
	Consumer string
	// PromptChanged, when set, is called after commit, before the results
	// are published, for every prompt id a batch gave a version or moved
	// a label of (the search service's prompts.get cache).
	PromptChanged func(tenant, id string)
	// Writers is how many transactions apply one batch at once, each
	// holding the events of its own prompt ids, tool names and read-model
	// keys (AGENTQ_INDEXER_WRITERS). Default 1.
	Writers int
}

func (o Options) withDefaults() Options {
	if o.Consumer == "" {
		o.Consumer = "indexer"
	}
	if o.Writers < 1 {
		o.Writers = 1
	}
	return o
}

// Sender stores results in a transaction and publishes them after commit.
// *outbox.Outbox satisfies it.
type Sender interface {
	Queue(b *pgx.Batch, evs ...event.Event) error
	Send(ctx context.Context, evs []event.Event) error
}

// Embedders are the models in force: one for prompts, one for tools (they
// may be the same).
type Embedders struct {
	Prompts, Tools embed.Embedder
}

// Indexer applies batches of events.
type Indexer struct {
	pool *pgxpool.Pool
	out  Sender
	emb  Embedders
	opts Options
	log  zerolog.Logger
	// rebuild is set for agentq replay, which applies a tenant's
	// history alone: its events do not wait for the rebuild.
	rebuild bool
}

// New returns an indexer writing to pool and publishing through out.
func New(pool *pgxpool.Pool, out Sender, emb Embedders, opts Options, log zerolog.Logger) *Indexer {
	return &Indexer{pool: pool, out: out, emb: emb, opts: opts.withDefaults(), log: log}
}

// Handle is the indexer's bus.BatchHandler. Embeddings are computed first,
// outside any transaction. Then the batch is split by what its events
// write (a prompt id, a tool name, a read-model key: see writers.go) into
// at most Options.Writers groups, applied at once, each in one
// transaction that claims its events in the inbox, applies the fresh ones
// in stream order and stores their results in the outbox. The results are
// published after the commits.
func (ix *Indexer) Handle(ctx context.Context, batch []*bus.Delivery) []error {
	errs := make([]error, len(batch))
	ops := make([]op, len(batch))
	var valid []int
	for i, d := range batch {
		o, err := decode(d)
		if err != nil {
			errs[i] = err
			continue
		}
		ops[i] = o
		valid = append(valid, i)
	}
	valid = ix.embed(ctx, ops, valid, errs)
	if len(valid) == 0 {
		return errs
	}
	groups := partition(ops, valid, ix.opts.Writers)
	out := make([][]event.Event, len(groups))
	if len(groups) == 1 {
		out[0] = ix.applyGroup(ctx, ops, groups[0], errs)
	} else {
		// Each group writes errs at its own indexes only.
		var wg sync.WaitGroup
		for g, idx := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[g] = ix.applyGroup(ctx, ops, idx, errs)
			}()
		}
		wg.Wait()
	}
	var results []event.Event
	for _, r := range out {
		results = append(results, r...)
	}
	if f := ix.opts.PromptChanged; f != nil {
		for _, i := range valid {
			if errs[i] != nil {
				continue
			}
			switch o := ops[i]; o.kind {
			case opPrompt:
				f(o.d.Tenant, o.prompt.ID)
			case opLabel:
				f(o.d.Tenant, o.label.promptID)
			}
		}
	}
	if err := ix.out.Send(ctx, results); err != nil {
		ix.log.Warn().Err(err).Int("events", len(results)).Msg("indexer results left for the outbox relay")
	}
	// BM25's statistics were logged by the batch's rows; fold them now,
	// after the results are out, in short transactions of their own
	// (migration 00011). Searches count unfolded changes too, so a failure
	// here loses nothing: the next batch folds them.
	if _, err := search.FoldStats(ctx, ix.pool); err != nil && ctx.Err() == nil {
		ix.log.Warn().Err(err).Msg("search statistics left in the log for the next batch")
	}
	return errs
}

// applyGroup applies the events of valid in one transaction and returns
// their results; an event that could not be applied gets its error in
// errs. Events of a tenant being rebuilt wait (deferred), the others are
// applied without them.
func (ix *Indexer) applyGroup(ctx context.Context, ops []op, valid []int, errs []error) []event.Event {
	results, err := ix.apply(ctx, ops, valid)
	var rb *rebuildingError
	if errors.As(err, &rb) {
		wait := map[int]bool{}
		for _, i := range rb.idx {
			wait[i] = true
			errs[i] = bus.Deferred(fmt.Errorf("tenant %s is being rebuilt (agentq replay); its events wait until it completes", ops[i].d.Tenant))
		}
		rest := valid[:0:0]
		for _, i := range valid {
			if !wait[i] {
				rest = append(rest, i)
			}
		}
		if valid = rest; len(valid) == 0 {
			return nil
		}
		results, err = ix.apply(ctx, ops, valid)
	}
	if err != nil {
		err = database.Classify(err)
		for _, i := range valid {
			errs[i] = err
		}
		return nil
	}
	return results
}

// embed computes the vectors of the prompts and tools in valid, one call
// per model, and returns the indexes still valid. An outage fails only the
// events that needed a vector.
func (ix *Indexer) embed(ctx context.Context, ops []op, valid []int, errs []error) []int {
	for _, kind := range []opKind{opPrompt, opTool} {
		e := ix.emb.Prompts
		if kind == opTool {
			e = ix.emb.Tools
		}
		var idx []int
		var texts []string
		for _, i := range valid {
			if ops[i].kind == kind && ops[i].reject == nil && ops[i].text != "" {
				idx = append(idx, i)
				texts = append(texts, ops[i].text)
			}
		}
		if len(texts) == 0 || e == nil {
			continue
		}
		vecs, err := e.Embed(ctx, texts)
		switch {
		case !refused(ctx, err):
		case len(texts) > 1:
			// One text the model refuses must not fail its neighbours:
			// embed one by one to find it.
			vecs, err = ix.embedEach(ctx, e, ops, idx, errs)
		default:
			// Alone, it is the one: stored without a vector, as it
			// would be beside others.
			ix.notEmbedded(ops[idx[0]], err)
			vecs, err = make([][]float32, 1), nil
		}
		if errors.Is(err, provider.ErrDimensionChanged) {
			// Not the events' fault, and indexing them would mix
			// dimensions under one model name: they wait for the
			// operator (restore the model, or agentq reindex).
			err = bus.Unavailable(err)
		}
		if err != nil {
			for _, i := range idx {
				errs[i] = fmt.Errorf("embed with %s: %w", e.Model(), err)
			}
			continue
		}
		for j, i := range idx {
			if vecs[j] != nil {
				ops[i].vec = vecs[j]
			}
		}
	}
	out := valid[:0]
	for _, i := range valid {
		if errs[i] == nil {
			out = append(out, i)
		}
	}
	return out
}

func (ix *Indexer) embedEach(ctx context.Context, e embed.Embedder, ops []op, idx []int, errs []error) ([][]float32, error) {
	vecs := make([][]float32, len(idx))
	for j, i := range idx {
		v, err := e.Embed(ctx, []string{ops[i].text})
		switch {
		case err == nil:
			vecs[j] = v[0]
		case !refused(ctx, err):
			return nil, err
		default:
			ix.notEmbedded(ops[i], err)
		}
	}
	return vecs, nil
}

// refused reports whether err is the model refusing the text itself (a
// 4xx, unusable output, a text with nothing to embed), not an outage, a
// changed dimension or the caller giving up: the text is then indexed
// without a vector.
func refused(ctx context.Context, err error) bool {
	return err != nil && !bus.IsUnavailable(err) && !errors.Is(err, provider.ErrDimensionChanged) && ctx.Err() == nil
}

// notEmbedded logs a text the model refused. It is stored without a
// vector: full text still finds it, and a reindex embeds it when the model
// accepts it.
func (ix *Indexer) notEmbedded(o op, err error) {
	ix.log.Warn().Err(err).Str("event_id", o.d.Event.ID()).Msg("text not embedded; indexed for full-text search only")
}

// lockKeys takes transaction-scoped advisory locks on every prompt id and
// tool name ops create, activate, register or set the health of, in a
// fixed order (no deadlock between copies): two copies never decide on one
// prompt id or tool name at once, so each sees what the other committed
// (the next free version, a label, the log of order.go).
func lockKeys(ctx context.Context, tx library.DB, ops []op, todo []int) error {
	seen := map[int64]bool{}
	var keys []int64
	for _, i := range todo {
		var s string
		switch o := &ops[i]; o.kind {
		case opPrompt, opLabel:
			s = "prompt\x00" + o.d.Tenant + "\x00" + o.logKey().key
		case opTool, opHealth:
			s = "tool\x00" + o.d.Tenant + "\x00" + o.logKey().key
		default:
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(s))
		k := int64(h.Sum64())
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(a, b int) bool { return keys[a] < keys[b] })
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) WITH ORDINALITY AS u(k, n) ORDER BY n`, keys)
	return err
}
