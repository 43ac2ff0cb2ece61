package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/search"
)

// IndexerOptions configure Indexer. Zero values take the defaults of the
// `agentq bench indexer` flags.
type IndexerOptions struct {
	Prompts         int     // prompt.created events
	PromptIDs       int     // distinct prompt ids they spread over (the rest are new versions)
	Tools           int     // tool.registered events, one per tool
	Requests        int     // requests per measurement and round
	Warmup          int     // requests per measurement before the first round
	Rounds          int     // rounds of the search measurements; medians are reported
	Concurrency     []int   // clients in flight at once
	Load            float64 // open-loop rate, a share of the throughput at the highest concurrency; 0 (unlike the flag's default): no open loop
	PromptsEmbedder string  // lexical (the built-in), sentence or provider
	ToolsEmbedder   string  // auto (what the indexer picks), lexical, sentence or provider
	AnchorRows      int     // rows of each kind the bare INSERT takes (0: all)
	AllowPGlite     bool    // run on PGlite (tests of the command; no figures)
	// SearchOnly names the tenant of an earlier run with the same corpus
	// options and seed: indexing is skipped and search is measured on it.
	SearchOnly string
	Seed       uint64 // of the generated corpus and queries
	// Copies is how many indexer copies consume the backlog and serve
	// search, each with connections of its own.
	Copies int
}

func (o *IndexerOptions) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Prompts, 100000)
	def(&o.PromptIDs, 1000)
	def(&o.Tools, 10000)
	def(&o.Requests, 2000)
	def(&o.Warmup, 200)
	def(&o.Rounds, 3)
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 8}
	}
	if o.PromptsEmbedder == "" {
		o.PromptsEmbedder = "lexical"
	}
	if o.ToolsEmbedder == "" {
		o.ToolsEmbedder = "auto"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Copies == 0 {
		o.Copies = 1
	}
	o.PromptIDs = min(o.PromptIDs, o.Prompts)
}

// Latency is one measurement: requests answered, their latency
// percentiles in milliseconds, and requests per second over its wall time.
type Latency struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	Rate     float64 `json:"per_second"`
}

// IndexingFigures are phase 1's rates, in rows (events) per second.
type IndexingFigures struct {
	// Publish is prompt.created and tool.registered published
	// asynchronously with acks, the indexer stopped.
	Publish float64 `json:"publish_per_second"`
	// Prompts and Tools are the indexer draining the published backlog
	// (consume only): from the moment its search service answers (it
	// starts consuming right after) to the last prompt.indexed, and from
	// there to the last tool.indexed.
	Prompts float64 `json:"prompts_per_second"`
	Tools   float64 `json:"tools_per_second"`
	// PromptsWall is every prompt over the time from the first publish
	// to the last prompt.indexed (publishing, start-up, consuming).
	PromptsWall float64 `json:"prompts_wall_per_second"`
	// PromptsEmbed and ToolsEmbed are the embedder alone, one goroutine,
	// batches of the indexer's batch size, on EmbedSamples texts.
	PromptsEmbed       float64 `json:"prompts_embed_per_second"`
	ToolsEmbed         float64 `json:"tools_embed_per_second"`
	PromptEmbedSamples int     `json:"prompt_embed_samples"`
	ToolEmbedSamples   int     `json:"tool_embed_samples"`
	// The anchor: the same rows, read back, inserted into copies of the
	// tables (LIKE ... INCLUDING ALL: the same indexes, GIN and HNSW
	// included): one transaction per batch of the indexer's batch size,
	// every INSERT pipelined in one round trip. Without vectors, then
	// with them (the HNSW index is maintained).
	AnchorPrompts        int     `json:"anchor_prompts"`
	AnchorTools          int     `json:"anchor_tools"`
	PromptsInsert        float64 `json:"prompts_insert_per_second"`
	PromptsInsertVectors float64 `json:"prompts_insert_vectors_per_second"`
	ToolsInsert          float64 `json:"tools_insert_per_second"`
	ToolsInsertVectors   float64 `json:"tools_insert_vectors_per_second"`
	Rejected             int     `json:"rejected"`
}

// SearchFigures are phase 2's measurements at one concurrency, medians
// over the rounds.
type SearchFigures struct {
	// Concurrency is the clients in flight (a closed loop); 0 for the
	// open loop at Load times the throughput of the highest concurrency.
	Concurrency   int     `json:"concurrency"`
	Load          float64 `json:"load,omitempty"`
	SearchPrompts Latency `json:"search_prompts"`
	// EmbedPrompts and EmbedTools embed one new query with the indexer's
	// model, as a search does on a query-cache miss before its arms run.
	EmbedPrompts    Latency `json:"embed_prompts"`
	EmbedTools      Latency `json:"embed_tools"`
	KNNPrompts      Latency `json:"bare_knn_prompts"`
	FullTextPrompts Latency `json:"bare_fulltext_prompts"`
	SearchTools     Latency `json:"search_tools"`
	KNNTools        Latency `json:"bare_knn_tools"`
	FullTextTools   Latency `json:"bare_fulltext_tools"`
	// ArmsPrompts and ArmsTools run the bare kNN statement and the bare
	// full-text arm of a query at once on two connections, timed until
	// both are done: the database work of a search running its arms apart.
	ArmsPrompts Latency `json:"bare_arms_prompts"`
	ArmsTools   Latency `json:"bare_arms_tools"`
	// Get and GetParams ask for ids drawn from every prompt id, so
	// answers come mostly from the database; GetHot asks for HotIDs ids
	// only, as agents running a few prompts do, so mostly from the
	// indexer's cache.
	Get Latency `json:"prompts_get"`
	// GetSQL is Get's database part alone: the statement prompts.get runs
	// on a cache miss, for ids drawn as Get's are, on a pooled connection.
	GetSQL    Latency `json:"bare_get_sql"`
	GetParams Latency `json:"prompts_get_params"`
	GetHot    Latency `json:"prompts_get_hot"`
	// Echo is the anchor of prompts.get: a bare NATS responder on its own
	// connection that returns a reply of a prompts.get's size, with no
	// service, JSON or database in between.
	Echo Latency `json:"nats_echo"`
	// Search over bare kNN, of the medians.
	PromptsRatioP50 float64 `json:"prompts_ratio_p50"`
	PromptsRatioP99 float64 `json:"prompts_ratio_p99"`
	ToolsRatioP50   float64 `json:"tools_ratio_p50"`
	ToolsRatioP99   float64 `json:"tools_ratio_p99"`
	// Search over both bare arms at once, of the medians: what agentq
	// adds to the database's work.
	PromptsArmsRatioP50 float64 `json:"prompts_arms_ratio_p50"`
	PromptsArmsRatioP99 float64 `json:"prompts_arms_ratio_p99"`
	ToolsArmsRatioP50   float64 `json:"tools_arms_ratio_p50"`
	ToolsArmsRatioP99   float64 `json:"tools_arms_ratio_p99"`
	// Searches over every round that found nothing, or were answered
	// from full text alone (degraded).
	EmptyPrompts    int `json:"empty_prompts"`
	EmptyTools      int `json:"empty_tools"`
	DegradedPrompts int `json:"degraded_prompts"`
	DegradedTools   int `json:"degraded_tools"`
}

// IndexerResult is what one bench indexer run measured.
type IndexerResult struct {
	Database     string `json:"database"`
	Server       string `json:"server"`
	PGVector     string `json:"pgvector"`
	PoolMaxConns int32  `json:"pool_max_conns"`
	Tenant       string `json:"tenant"`
	Prompts      int    `json:"prompts"`
	PromptIDs    int    `json:"prompt_ids"`
	Tools        int    `json:"tools"`
	Requests     int    `json:"requests"`
	Rounds       int    `json:"rounds"`
	BatchSize    int    `json:"batch_size"`
	PromptModel  string `json:"prompt_model"`
	ToolModel    string `json:"tool_model"`
	PromptK      int    `json:"prompt_k"`
	ToolK        int    `json:"tool_k"`
	EFSearch     int    `json:"ef_search"`
	PromptIndex  string `json:"prompt_index"`
	Probes       int    `json:"probes"`
	// PromptLists are the lists of prompts' IVFFlat index searched (0:
	// HNSW), after the maintenance the indexer runs (PromptRebuild).
	PromptLists       int             `json:"prompt_index_lists"`
	PromptRebuild     *IndexRebuild   `json:"prompt_index_rebuild,omitempty"`
	LexicalCandidates int             `json:"lexical_candidates"`
	PromptWords       float64         `json:"prompt_words_mean"`
	Indexing          IndexingFigures `json:"indexing"`
	Search            []SearchFigures `json:"search"`
	// Recall is the kNN arm's recall@K against an exact scan, over the
	// bench's query vectors: what the HNSW index (ef_search, iterative
	// scan, the partial index) loses.
	Recall     KNNRecall `json:"knn_recall"`
	HotIDs     int       `json:"hot_ids"`
	Copies     int       `json:"indexer_copies"`
	Writers    int       `json:"indexer_writers"`
	SearchOnly bool      `json:"search_only"`
}

// IndexRebuild is a rebuild of prompts' IVFFlat index before search was
// measured: lists before and after, seconds it took.
type IndexRebuild struct {
	Rows    int     `json:"rows"`
	From    int     `json:"from_lists"`
	To      int     `json:"to_lists"`
	Seconds float64 `json:"seconds"`
}

// KNNRecall is the mean share of the exact K nearest rows the kNN
// statement returns, per kind.
type KNNRecall struct {
	Queries int     `json:"queries"`
	Prompts float64 `json:"prompts"`
	Tools   float64 `json:"tools"`
}

// benchHotIDs is how many prompt ids the hot prompts.get measurement asks
// for.
const benchHotIDs = 100

// Indexer runs the indexer benchmark (see `agentq bench indexer -h` and
// the package comment) on an embedded NATS server and cfg's database;
// progress receives a line per step.
func Indexer(ctx context.Context, cfg config.Config, o IndexerOptions, progress io.Writer, log zerolog.Logger) (IndexerResult, error) {
	o.defaults()
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench indexer: "+format+"\n", args...) }
	res := IndexerResult{Database: "AGENTQ_DATABASE_URL", Prompts: o.Prompts, PromptIDs: o.PromptIDs, Tools: o.Tools,
		Requests: o.Requests, Rounds: o.Rounds, BatchSize: cfg.Runner(indexer.Consumer.Name).BatchSize}
	dir, err := os.MkdirTemp("", "agentq-bench-indexer-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := broker.Start(broker.Options{Port: -1, StoreDir: dir, Log: zerolog.Nop()})
	if err != nil {
		return res, err
	}
	defer srv.Shutdown()
	cfg.NATSURL = srv.ClientURL()
	cfg.MetricsAddr = ""
	cfg.EmbedPrompts, cfg.EmbedTools = o.PromptsEmbedder, o.ToolsEmbedder
	if cfg.DatabaseURL == "" {
		if !o.AllowPGlite {
			return res, errors.New("AGENTQ_DATABASE_URL is not set: the figures need native Postgres with pgvector (--allow-pglite runs on the PGlite dev database, for checking the command only)")
		}
		db, err := devdb.Start(ctx, devdb.Options{Dir: cfg.PGliteDir, Log: zerolog.Nop()})
		if err != nil {
			return res, err
		}
		defer db.Close()
		cfg.DatabaseURL = db.URL()
		res.Database = "PGlite dev database"
	}
	d, err := app.Start(ctx, cfg, "bench-indexer", log.Level(zerolog.WarnLevel))
	if err != nil {
		return res, err
	}
	defer d.Close(context.WithoutCancel(ctx))
	if err := d.Pool.QueryRow(ctx, `SELECT version(), coalesce((SELECT extversion FROM pg_extension WHERE extname = 'vector'), '')`).Scan(&res.Server, &res.PGVector); err != nil {
		return res, err
	}
	if isPGlite(res.Server) {
		if !o.AllowPGlite {
			return res, fmt.Errorf("the database is PGlite (%s): the figures need native Postgres with pgvector; --allow-pglite runs anyway, for checking the command only", res.Server)
		}
		res.Database = "PGlite (WASM): these figures mean nothing for production"
	}
	res.PoolMaxConns = d.Pool.Config().MaxConns
	sc := cfg.Search
	res.PromptK, res.ToolK = max(sc.PromptK, sc.PromptLimit), max(sc.ToolK, sc.ToolLimit)
	res.EFSearch, res.LexicalCandidates = sc.EFSearch, sc.LexicalCandidates
	res.PromptIndex, res.Probes = sc.PromptIndex, sc.Probes

	// Our own embedders, the same models as the indexer's: the embedder
	// alone, and the query vectors of the bare kNN.
	pe, closeP, err := indexer.OpenEmbedder(ctx, cfg, indexer.Choose(cfg, indexer.KindPrompts), log.Level(zerolog.WarnLevel))
	if err != nil {
		return res, err
	}
	defer closeP()
	te, closeT, err := indexer.OpenEmbedder(ctx, cfg, indexer.Choose(cfg, indexer.KindTools), log.Level(zerolog.WarnLevel))
	if err != nil {
		return res, err
	}
	defer closeT()
	res.PromptModel, res.ToolModel = pe.Model(), te.Model()

	res.Copies = o.Copies
	res.Writers = cfg.IndexerWriters
	res.Tenant, res.SearchOnly, res.HotIDs = fmt.Sprintf("bench-ix-%x", rand.Uint32()), o.SearchOnly != "", min(benchHotIDs, o.PromptIDs)
	if res.SearchOnly {
		res.Tenant = o.SearchOnly
	}
	say("generating %d prompts over %d ids and %d tools (tenant %s)", o.Prompts, o.PromptIDs, o.Tools, res.Tenant)
	c := newBenchCorpus(o)
	res.PromptWords = c.meanWords()

	lexical, err := search.New(d.Pool, search.Embedders{}, indexer.SearchOptions(cfg.Search), log)
	if err != nil {
		return res, err
	}
	b := &indexerBench{d: d, cfg: cfg, o: o, c: c, tenant: res.Tenant, say: say, pe: pe, te: te, res: &res, log: log, lexical: lexical,
		searchOpts: indexer.SearchOptions(cfg.Search)}
	if res.SearchOnly {
		if err := b.existing(ctx); err != nil {
			return res, err
		}
		c.dropContents()
		if err := b.search(ctx); err != nil {
			return res, fmt.Errorf("search: %w", err)
		}
		return res, nil
	}
	if err := b.indexing(ctx); err != nil {
		return res, fmt.Errorf("indexing: %w", err)
	}
	if err := b.embedders(ctx); err != nil {
		return res, fmt.Errorf("embedders alone: %w", err)
	}
	if err := b.anchors(ctx); err != nil {
		return res, fmt.Errorf("bare INSERT: %w", err)
	}
	c.dropContents()
	if err := b.search(ctx); err != nil {
		return res, fmt.Errorf("search: %w", err)
	}
	return res, nil
}

func isPGlite(version string) bool {
	v := strings.ToLower(version)
	return strings.Contains(v, "pglite") || strings.Contains(v, "wasm") || strings.Contains(v, "emscripten")
}

type indexerBench struct {
	d      *app.Deps
	cfg    config.Config
	o      IndexerOptions
	c      *benchCorpus
	tenant string
	say    func(string, ...any)
	pe, te embed.Embedder
	res    *IndexerResult
	// lexical gives the statement of search's full-text arm (an anchor).
	lexical    *search.Searcher
	searchOpts search.Options // the indexer's
	stop       func()         // stops the indexer copies
	log        zerolog.Logger
}
