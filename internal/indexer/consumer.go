package indexer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

// Consumer runs the indexer with default options in an agentq process.
var Consumer = NewConsumer(Options{})

// NewConsumer returns the indexer as an app consumer: the event runner and
// the search service, side by side.
func NewConsumer(opts Options) app.Consumer {
	writers := opts.Writers // 0: AGENTQ_INDEXER_WRITERS
	opts = opts.withDefaults()
	return app.Consumer{Name: opts.Consumer, Run: func(ctx context.Context, d *app.Deps) (err error) {
		if writers == 0 {
			opts.Writers = d.Config.IndexerWriters
		}
		if err := database.EnsureFence(ctx, d.Pool, opts.Consumer); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: not a failure
			}
			return err
		}
		known := 0
		if d.Config.Embed.BaseURL != "" {
			if known, err = StoredDimension(ctx, d.Pool, d.Config.Embed.Model); err != nil {
				return fmt.Errorf("stored embedding dimension: %w", err)
			}
		}
		emb, closeEmb, err := openEmbedders(ctx, d.Config, known, d.Log)
		if err != nil {
			return err
		}
		defer closeEmb()
		stale := make(chan struct{})
		go func() { defer close(stale); warnStale(ctx, d.Pool, emb, d.Log) }()
		defer func() { <-stale }() // ctx is done by then: it ends at once
		s, stop, err := serveSearch(ctx, d, emb)
		if err != nil {
			return err
		}
		defer stop()
		opts.PromptChanged = s.PromptChanged
		ix := New(d.Pool, d.Outbox, emb, opts, d.Log)
		r, err := bus.NewRunner(d.JS, d.Schemas, ix.Handle, d.Config.Runner(opts.Consumer, Subjects...), d.Log, d.Metrics)
		if err != nil {
			return err
		}
		return r.Run(ctx)
	}}
}

// RebuildTarget is the indexer as agentq replay rebuilds it: the same
// handler, sending nothing. Its state is what stream order gives, and a
// rebuild applies the history in stream order. Its results go through
// replay.Results: an event the live copies had not applied when the
// rebuild began (they were behind) is applied by the rebuild, and its
// delivery to them is then a duplicate, so the rebuild stores the result
// for the relay — only if no result of that event is on the stream.
func RebuildTarget(pool *pgxpool.Pool, emb Embedders, opts Options, log zerolog.Logger) replay.Target {
	opts = opts.withDefaults()
	results := replay.NewResultsByCause(ResultSubjects...)
	ix := New(pool, results, emb, opts, log)
	ix.rebuild = true
	return replay.Target{
		Results:  results,
		Consumer: opts.Consumer,
		Subjects: Subjects,
		Reset: func(ctx context.Context, tx pgx.Tx, tenant string) error {
			return Reset(ctx, tx, opts.Consumer, tenant)
		},
		Handler: ix.Handle,
	}
}

// serveSearch creates the vector indexes of the models in force and
// starts the search service (search.prompts, search.tools, prompts.get) in
// the queue group every indexer copy joins, following every copy's prompt
// results for its prompts.get cache; the returned func stops both.
func serveSearch(ctx context.Context, d *app.Deps, emb Embedders) (*search.Searcher, func(), error) {
	semb := search.Embedders{Prompts: emb.Prompts, Tools: emb.Tools}
	c := d.Config.Search
	opts := SearchOptions(c)
	opts.Registerer = d.Registry
	if err := search.EnsureIndexes(ctx, d.Pool, semb, opts.Indexes()); err != nil {
		if !bus.IsUnavailable(err) {
			return nil, nil, fmt.Errorf("vector indexes: %w", err)
		}
		// A provider that is down cannot say its dimension yet: serve
		// anyway (the vector arm scans until the index exists) and
		// create the index when it answers.
		d.Log.Warn().Err(err).Msg("vector indexes wait for the embedding provider")
		go ensureIndexesLater(ctx, d, semb, opts.Indexes())
	}
	go maintainIndexes(ctx, d, semb, opts.Indexes(), c.IndexCheck)
	if c.PendingFlush > 0 {
		go flushPendingLists(ctx, d, c.PendingFlush)
	}
	s, err := search.New(d.Pool, semb, opts, d.Log)
	if err != nil {
		return nil, nil, err
	}
	unfollow, err := s.FollowPromptChanges(d.NC)
	if err != nil {
		return nil, nil, fmt.Errorf("follow prompt results: %w", err)
	}
	svc, err := service.New(d.NC, service.Options{
		Name: "agentq-search", Description: "agentq prompt library and tool registry search",
		QueueGroup: "agentq-search", Timeout: c.Timeout, Concurrency: c.Concurrency,
		Validator: d.Schemas, Log: d.Log, Registry: d.Registry,
	})
	if err != nil {
		unfollow()
		return nil, nil, fmt.Errorf("search service: %w", err)
	}
	if err := s.Register(svc); err != nil {
		_ = svc.Stop()
		unfollow()
		return nil, nil, fmt.Errorf("search service: %w", err)
	}
	return s, func() { _ = svc.Stop(); unfollow() }, nil
}

func ensureIndexesLater(ctx context.Context, d *app.Deps, semb search.Embedders, o search.IndexOptions) {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := search.EnsureIndexes(ctx, d.Pool, semb, o)
		if err == nil {
			d.Log.Info().Msg("vector indexes created")
			return
		}
		if !bus.IsUnavailable(err) && ctx.Err() == nil {
			d.Log.Error().Err(err).Msg("vector indexes")
			return
		}
	}
}

// maintainIndexes runs search.MaintainIndexes every interval until ctx
// ends: an IVFFlat index is rebuilt as the prompts it covers grow. A
// failure is logged and tried again at the next check.
func maintainIndexes(ctx context.Context, d *app.Deps, semb search.Embedders, o search.IndexOptions, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, err := search.MaintainIndexes(ctx, d.Pool, semb, o)
		switch {
		case err != nil && ctx.Err() == nil:
			d.Log.Warn().Err(err).Msg("vector index maintenance; trying again at the next check")
		case m.Rebuilt:
			d.Log.Info().Str("index", m.Index).Int("rows", m.Rows).Int("lists", m.Lists).Int("lists_before", m.Before).
				Dur("took", m.Took).Strs("dropped", m.Dropped).Msg("vector index rebuilt for the rows it covers")
		case len(m.Dropped) > 0:
			d.Log.Info().Strs("dropped", m.Dropped).Msg("vector indexes dropped")
		}
	}
}

// flushPendingLists merges the full-text indexes' pending lists every
// interval until ctx ends (see search.FlushPendingLists). After a failure
// it waits a minute: a database that refuses it (not the indexes' owner)
// would refuse it every time.
func flushPendingLists(ctx context.Context, d *app.Deps, every time.Duration) {
	wait := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = every
		pages, err := search.FlushPendingLists(ctx, d.Pool)
		switch {
		case err != nil && ctx.Err() == nil:
			d.Log.Warn().Err(err).Msg("full-text pending lists left for autovacuum; trying again in a minute")
			wait = max(every, time.Minute)
		case pages > 0:
			d.Log.Debug().Int64("pages", pages).Msg("full-text pending lists merged")
		}
	}
}

func weights(w [4]float64) search.Weights {
	return search.Weights{Similarity: w[0], Quality: w[1], Recency: w[2], Usage: w[3]}
}

// SearchOptions are the search service's options for the configuration c.
func SearchOptions(c config.Search) search.Options {
	return search.Options{
		PromptK: c.PromptK, PromptLimit: c.PromptLimit, ToolK: c.ToolK, ToolLimit: c.ToolLimit,
		PromptWeights: weights(c.PromptWeights), ToolWeights: weights(c.ToolWeights),
		HalfLife: c.HalfLife, EFSearch: c.EFSearch, LexicalCandidates: c.LexicalCandidates,
		PromptIndex: search.Method(c.PromptIndex), Probes: c.Probes,
		NeutralQuality: c.NeutralQuality, EmbedTimeout: c.EmbedTimeout, CacheSize: c.CacheSize,
		GetCacheSize: c.GetCacheSize, GetCacheTTL: c.GetCacheTTL, Prepared: c.Prepared,
		ArmsApart: armsApart(c.ArmsApart),
		Render:    library.Limits{MaxOutput: c.RenderMaxOutput, MaxSteps: c.RenderMaxSteps, Timeout: c.RenderTimeout},
	}
}

// armsApart is search.Options.ArmsApart for AGENTQ_SEARCH_ARMS_APART,
// whose 0 means none (search's 0 takes the default).
func armsApart(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
