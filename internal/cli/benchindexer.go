package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/pgvector/pgvector-go"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/broker"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
)

func init() {
	describe("bench indexer", "[--prompts N] [--tools N] [--requests N] [--rounds N] [--concurrency 1,8] [--tools-embedder E] [--search-only TENANT] [--json]",
		`Measures the indexer on the database at AGENTQ_DATABASE_URL (native Postgres
with pgvector; PGlite only with --allow-pglite, and its figures mean nothing)
with an embedded NATS server, in one run:

  indexing: N generated prompts (about 130 words, Zipf-distributed words,
  parameters, tags, versions of --prompt-ids ids) and M tools are published
  as a backlog, then the indexer consumes them: events applied per second,
  beside the embedder alone and the bare INSERT of the same rows (pipelined,
  one transaction per batch, no NATS, no embedding) with and without vectors;

  search: search.prompts, search.tools and prompts.get through NATS
  request/reply from a separate connection, at each --concurrency, beside the
  bare SQL kNN query (same filter, model, K and ef_search, SET LOCAL in a
  read-only transaction) and the bare full-text arm on the same database.
  prompts.get asks for ids drawn from every prompt id (mostly answered from
  the database), then for 100 hot ids (mostly from the indexer's cache),
  beside a bare NATS request/reply of the same size. Then each of these again
  in an open loop at --load times the throughput it reached at the highest
  concurrency in that round: requests leave at fixed intervals, whatever the
  answers do, and each is timed from when it was due (latency at a load the
  machine can carry, where the closed loop at high concurrency measures
  queueing at saturation). p50/p99/max and throughput are medians over
  --rounds.

--search-only TENANT skips indexing and measures search on the tenant of an
earlier run with the same --prompts, --prompt-ids, --tools and --seed.

Every search query is generated afresh (words of the corpus, quotes of a
prompt or tool, paraphrase-like rewrites), so the query-embedding cache does
not hide the embedder. Each run writes a tenant of its own; run it on a
database of its own, dropped between full runs.`)
}

// IndexerBenchOptions configure BenchIndexer. Zero values take the
// defaults of the flags.
type IndexerBenchOptions struct {
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

func (o *IndexerBenchOptions) defaults() {
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
	Concurrency     int     `json:"concurrency"`
	Load            float64 `json:"load,omitempty"`
	SearchPrompts   Latency `json:"search_prompts"`
	KNNPrompts      Latency `json:"bare_knn_prompts"`
	FullTextPrompts Latency `json:"bare_fulltext_prompts"`
	SearchTools     Latency `json:"search_tools"`
	KNNTools        Latency `json:"bare_knn_tools"`
	FullTextTools   Latency `json:"bare_fulltext_tools"`
	// Get and GetParams ask for ids drawn from every prompt id, so
	// answers come mostly from the database; GetHot asks for HotIDs ids
	// only, as agents running a few prompts do, so mostly from the
	// indexer's cache.
	Get       Latency `json:"prompts_get"`
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
	// Searches over every round that found nothing, or were answered
	// from full text alone (degraded).
	EmptyPrompts    int `json:"empty_prompts"`
	EmptyTools      int `json:"empty_tools"`
	DegradedPrompts int `json:"degraded_prompts"`
	DegradedTools   int `json:"degraded_tools"`
}

// IndexerBenchResult is what one bench indexer run measured.
type IndexerBenchResult struct {
	Database          string          `json:"database"`
	Server            string          `json:"server"`
	PGVector          string          `json:"pgvector"`
	PoolMaxConns      int32           `json:"pool_max_conns"`
	Tenant            string          `json:"tenant"`
	Prompts           int             `json:"prompts"`
	PromptIDs         int             `json:"prompt_ids"`
	Tools             int             `json:"tools"`
	Requests          int             `json:"requests"`
	Rounds            int             `json:"rounds"`
	BatchSize         int             `json:"batch_size"`
	PromptModel       string          `json:"prompt_model"`
	ToolModel         string          `json:"tool_model"`
	PromptK           int             `json:"prompt_k"`
	ToolK             int             `json:"tool_k"`
	EFSearch          int             `json:"ef_search"`
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

func runBenchIndexer(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench indexer", e)
	var o IndexerBenchOptions
	fs.IntVar(&o.Prompts, "prompts", 100000, "prompt.created events to index")
	fs.IntVar(&o.PromptIDs, "prompt-ids", 1000, "distinct prompt ids the prompts spread over (the others are new versions)")
	fs.IntVar(&o.Tools, "tools", 10000, "tool.registered events to index (one per tool)")
	fs.IntVar(&o.Requests, "requests", 2000, "requests per measurement, concurrency and round")
	fs.IntVar(&o.Warmup, "warmup", 200, "requests per measurement before the first round")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds of the search measurements; medians are reported")
	conc := fs.String("concurrency", "1,8", "comma-separated numbers of clients in flight")
	fs.Float64Var(&o.Load, "load", 0.5, "open-loop rate of each measurement, as a fraction of its throughput at the highest concurrency (0: none)")
	fs.StringVar(&o.PromptsEmbedder, "prompts-embedder", "lexical", "embedder of prompts: lexical (built-in), sentence or provider")
	fs.StringVar(&o.ToolsEmbedder, "tools-embedder", "auto", "embedder of tools: auto (as the indexer picks: the sentence encoder when installed), lexical, sentence or provider")
	fs.IntVar(&o.AnchorRows, "anchor-rows", 0, "rows of each kind the bare INSERT anchor takes, the first indexed (0: all; into an empty copy, so fewer rows favour the anchor)")
	fs.BoolVar(&o.AllowPGlite, "allow-pglite", false, "run on PGlite (checks the command works; the figures mean nothing)")
	seed := fs.Uint64("seed", 1, "seed of the generated corpus and queries")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("v", false, "print progress and per-round figures")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.IntVar(&o.Copies, "copies", 1, "indexer copies consuming the backlog and serving search, each with its own connections")
	fs.StringVar(&o.SearchOnly, "search-only", "", "measure search only, on TENANT of an earlier run with the same --prompts, --prompt-ids, --tools and --seed (its corpus is generated again, not indexed)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	for _, s := range strings.Split(*conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || c < 1 || c > 256 {
			fmt.Fprintf(e.Stderr, "agentq bench indexer: --concurrency %q: want numbers 1..256\n", *conc)
			return errUsage
		}
		o.Concurrency = append(o.Concurrency, c)
	}
	if o.Prompts < 1 || o.PromptIDs < 1 || o.Tools < 1 || o.Requests < 1 || o.Rounds < 1 || o.Warmup < 0 || o.Copies < 1 || o.Copies > 16 || o.Load < 0 || o.Load > 1 {
		fmt.Fprintln(e.Stderr, "agentq bench indexer: --prompts, --prompt-ids, --tools, --requests and --rounds must be positive, --copies 1..16, --load 0..1")
		return errUsage
	}
	o.Seed = *seed
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var progress io.Writer = io.Discard
	if *verbose {
		progress = e.Stderr
	}
	res, err := BenchIndexer(ctx, cfg, o, progress, log)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printIndexerBench(e.Stdout, res)
	return nil
}

func printIndexerBench(w io.Writer, r IndexerBenchResult) {
	ix := r.Indexing
	fmt.Fprintf(w, `agentq bench indexer: %d prompts (%d ids, %.0f words on average), %d tools; tenant %s
  database: %s
  server: %s, pgvector %s, pool of %d connections, batch %d, indexer copies %d of %d writers each
  models: prompts %s, tools %s; prompt K %d, tool K %d, ef_search %d, full-text candidates %d

%sindexing (events applied per second)
  publish, async with acks (indexer stopped)        %9.0f /s
  prompts: indexer draining the backlog             %9.0f /s   (first publish → last prompt.indexed: %.0f /s)
    embedder alone (%s, %d texts)%s %9.0f /s
    bare INSERT, no vectors (anchor, %d rows)%s %9.0f /s
    bare INSERT with vectors (HNSW maintained)      %9.0f /s
  tools: indexer draining the backlog               %9.0f /s
    embedder alone (%s, %d texts)%s %9.0f /s
    bare INSERT, no vectors (anchor, %d rows)%s %9.0f /s
    bare INSERT with vectors (HNSW maintained)      %9.0f /s
  rejected: %d
`, r.Prompts, r.PromptIDs, r.PromptWords, r.Tools, r.Tenant, r.Database, r.Server, r.PGVector, r.PoolMaxConns, r.BatchSize, r.Copies, r.Writers,
		r.PromptModel, r.ToolModel, r.PromptK, r.ToolK, r.EFSearch, r.LexicalCandidates, skipped(r.SearchOnly),
		ix.Publish, ix.Prompts, ix.PromptsWall,
		r.PromptModel, ix.PromptEmbedSamples, pad(r.PromptModel, ix.PromptEmbedSamples), ix.PromptsEmbed,
		ix.AnchorPrompts, padTo(fmt.Sprintf("    bare INSERT, no vectors (anchor, %d rows)", ix.AnchorPrompts)), ix.PromptsInsert, ix.PromptsInsertVectors, ix.Tools,
		r.ToolModel, ix.ToolEmbedSamples, pad(r.ToolModel, ix.ToolEmbedSamples), ix.ToolsEmbed,
		ix.AnchorTools, padTo(fmt.Sprintf("    bare INSERT, no vectors (anchor, %d rows)", ix.AnchorTools)), ix.ToolsInsert, ix.ToolsInsertVectors, ix.Rejected)
	fmt.Fprintf(w, "\nsearch and get through NATS request/reply (separate connection), %d requests per measurement, medians of %d rounds\n", r.Requests, r.Rounds)
	fmt.Fprintf(w, "  %-4s %-36s %9s %9s %9s %10s %7s\n", "conc", "measurement", "p50 ms", "p99 ms", "max ms", "per s", "errors")
	for _, s := range r.Search {
		c := s.label()
		for _, m := range []struct {
			name string
			l    Latency
		}{
			{"search.prompts (NATS)", s.SearchPrompts}, {"  bare SQL kNN, prompts", s.KNNPrompts}, {"  bare full-text arm, prompts", s.FullTextPrompts},
			{"search.tools (NATS)", s.SearchTools}, {"  bare SQL kNN, tools", s.KNNTools}, {"  bare full-text arm, tools", s.FullTextTools},
			{"prompts.get (NATS)", s.Get}, {"prompts.get with params (NATS)", s.GetParams},
			{fmt.Sprintf("prompts.get, %d hot ids (NATS)", r.HotIDs), s.GetHot},
			{"  bare NATS request/reply, same size", s.Echo},
		} {
			fmt.Fprintf(w, "  %-4s %-36s %9.2f %9.2f %9.2f %10.0f %7d\n", c, m.name, m.l.P50, m.l.P99, m.l.Max, m.l.Rate, m.l.Errors)
		}
		fmt.Fprintf(w, "  %-4s search / bare kNN: prompts p50 %.1f×, p99 %.1f×; tools p50 %.1f×, p99 %.1f×\n",
			c, s.PromptsRatioP50, s.PromptsRatioP99, s.ToolsRatioP50, s.ToolsRatioP99)
		fmt.Fprintf(w, "  %-4s searches with no result: prompts %d, tools %d; answered degraded: prompts %d, tools %d\n",
			c, s.EmptyPrompts, s.EmptyTools, s.DegradedPrompts, s.DegradedTools)
	}
	if len(r.Search) > 0 && r.Search[len(r.Search)-1].Load > 0 {
		fmt.Fprintf(w, "  (%s: open loop at that share of each row's throughput at the highest concurrency, timed from when each request was due)\n", r.Search[len(r.Search)-1].label())
	}
	fmt.Fprintf(w, "  kNN recall@K against an exact scan (%d queries each): prompts@%d %.3f, tools@%d %.3f\n",
		r.Recall.Queries, r.PromptK, r.Recall.Prompts, r.ToolK, r.Recall.Tools)
	fmt.Fprintf(w, "\ntargets (issue 8): search p99 ≤ 10 ms, prompts.get p99 ≤ 2 ms, indexing ≥ 1,000 prompts/s\n")
	if !r.SearchOnly {
		fmt.Fprintf(w, "  indexing %.0f prompts/s: %s\n", ix.Prompts, verdict(ix.Prompts >= 1000))
	}
	for _, s := range r.Search {
		where := fmt.Sprintf("concurrency %d", s.Concurrency)
		if s.Load > 0 {
			where = fmt.Sprintf("open loop at %.0f%% of capacity", 100*s.Load)
		}
		fmt.Fprintf(w, "  %s: search.prompts p99 %.2f ms %s; search.tools p99 %.2f ms %s; prompts.get p99 %.2f ms %s, with params %.2f ms %s, hot ids %.2f ms %s\n",
			where, s.SearchPrompts.P99, verdict(s.SearchPrompts.P99 <= 10), s.SearchTools.P99, verdict(s.SearchTools.P99 <= 10),
			s.Get.P99, verdict(s.Get.P99 <= 2), s.GetParams.P99, verdict(s.GetParams.P99 <= 2), s.GetHot.P99, verdict(s.GetHot.P99 <= 2))
	}
}

// label is s's load in the table: its concurrency, or the open loop's
// share of capacity.
func (s SearchFigures) label() string {
	if s.Load > 0 {
		return fmt.Sprintf("%.0f%%", 100*s.Load)
	}
	return strconv.Itoa(s.Concurrency)
}

// pad and padTo align the lines whose labels vary in length.
func pad(model string, n int) string {
	return padTo(fmt.Sprintf("    embedder alone (%s, %d texts)", model, n))
}

func padTo(label string) string { return strings.Repeat(" ", max(1, 52-len(label))) }

func skipped(searchOnly bool) string {
	if searchOnly {
		return "(--search-only: indexing was not run; its figures are zero)\n"
	}
	return ""
}

func verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}

// BenchIndexer runs the indexer benchmark (see `agentq bench indexer -h`)
// on an embedded NATS server and cfg's database; progress receives a line
// per step.
func BenchIndexer(ctx context.Context, cfg config.Config, o IndexerBenchOptions, progress io.Writer, log zerolog.Logger) (IndexerBenchResult, error) {
	o.defaults()
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench indexer: "+format+"\n", args...) }
	res := IndexerBenchResult{Database: "AGENTQ_DATABASE_URL", Prompts: o.Prompts, PromptIDs: o.PromptIDs, Tools: o.Tools,
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
	b := &indexerBench{d: d, cfg: cfg, o: o, c: c, tenant: res.Tenant, say: say, pe: pe, te: te, res: &res, log: log, lexical: lexical}
	if res.SearchOnly {
		if err := b.existing(ctx); err != nil {
			return res, err
		}
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
	o      IndexerBenchOptions
	c      *benchCorpus
	tenant string
	say    func(string, ...any)
	pe, te embed.Embedder
	res    *IndexerBenchResult
	// lexical gives the statement of search's full-text arm (an anchor).
	lexical *search.Searcher
	stop    func() // stops the indexer copies
	log     zerolog.Logger
}

// --- phase 1: indexing ---

// resultCounter counts the indexer's results of one tenant on a
// connection of its own and notes when each kind reached its target.
type resultCounter struct {
	mu                     sync.Mutex
	prompts, tools         int
	promptsWant, toolsWant int
	promptsAt, toolsAt     time.Time // when the last one arrived
	rejected               int
	firstReject            string
	promptsCh, toolsCh     chan struct{} // closed then
	last                   time.Time
}

func (rc *resultCounter) handle(m *nats.Msg) {
	now := time.Now()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.last = now
	kind := ""
	switch {
	case strings.HasPrefix(m.Subject, "prompt.indexed."):
		kind = "prompt"
	case strings.HasPrefix(m.Subject, "tool.indexed."):
		kind = "tool"
	default: // indexer.rejected
		var data struct { // the body is the event's data (binary mode)
			EventType string `json:"event_type"`
			Reason    string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &data)
		rc.rejected++
		if rc.firstReject == "" {
			rc.firstReject = data.EventType + ": " + data.Reason
		}
		if strings.Contains(data.EventType, "tool") {
			kind = "tool"
		} else {
			kind = "prompt"
		}
	}
	if kind == "prompt" {
		if rc.prompts++; rc.prompts == rc.promptsWant {
			rc.promptsAt = now
			close(rc.promptsCh)
		}
	} else {
		if rc.tools++; rc.tools == rc.toolsWant {
			rc.toolsAt = now
			close(rc.toolsCh)
		}
	}
}

func (b *indexerBench) indexing(ctx context.Context) error {
	mon, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-monitor"))
	if err != nil {
		return err
	}
	defer mon.Close()
	rc := &resultCounter{promptsWant: b.o.Prompts, toolsWant: b.o.Tools,
		promptsCh: make(chan struct{}), toolsCh: make(chan struct{}), last: time.Now()}
	for _, s := range []string{"prompt.indexed.", "tool.indexed.", "indexer.rejected."} {
		sub, err := mon.Subscribe(s+b.tenant, rc.handle)
		if err != nil {
			return err
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := mon.Flush(); err != nil {
		return err
	}

	// The backlog: every prompt, then every tool, published while no
	// indexer runs.
	b.say("publishing %d prompt.created and %d tool.registered", b.o.Prompts, b.o.Tools)
	start := time.Now()
	for i := range b.c.prompts {
		ev, err := bus.NewEvent(indexer.TypePromptCreated, b.tenant, "agentq-bench", b.c.promptData(i))
		if err != nil {
			return err
		}
		if _, err := b.d.Publisher.PublishAsync(ev); err != nil {
			return err
		}
	}
	for i := range b.c.tools {
		ev, err := bus.NewEvent(indexer.TypeToolRegistered, b.tenant, "agentq-bench", b.c.toolData(i))
		if err != nil {
			return err
		}
		if _, err := b.d.Publisher.PublishAsync(ev); err != nil {
			return err
		}
	}
	if err := b.d.Publisher.Flush(ctx); err != nil {
		return err
	}
	b.res.Indexing.Publish = float64(b.o.Prompts+b.o.Tools) / time.Since(start).Seconds()
	b.say("published at %.0f/s; starting the indexer", b.res.Indexing.Publish)

	runDone, err := b.startIndexers(ctx)
	if err != nil {
		return err
	}
	// It starts consuming right after its search service answers (the
	// embedders are open and the vector indexes exist by then).
	ready, err := b.serviceReady(ctx, mon, runDone)
	if err != nil {
		return err
	}
	b.say("indexer serving after %s; draining", time.Since(start).Round(time.Millisecond))
	if err := waitResults(ctx, rc, rc.promptsCh, runDone, b.say, "prompts"); err != nil {
		return err
	}
	if err := waitResults(ctx, rc, rc.toolsCh, runDone, b.say, "tools"); err != nil {
		return err
	}
	rc.mu.Lock()
	ix := &b.res.Indexing
	// A copy may drain a tiny backlog before the probe sees any copy
	// serving: then only the time from the first publish means anything.
	drain := rc.promptsAt.Sub(ready)
	if drain <= 0 {
		drain = rc.promptsAt.Sub(start)
	}
	ix.Prompts = float64(b.o.Prompts) / drain.Seconds()
	ix.PromptsWall = float64(b.o.Prompts) / rc.promptsAt.Sub(start).Seconds()
	// Tools follow prompts in the stream; in a run so small that both
	// share one batch, the tools' time is the whole drain.
	toolsTime := rc.toolsAt.Sub(rc.promptsAt)
	if toolsTime <= 0 {
		toolsTime = rc.toolsAt.Sub(ready)
	}
	if toolsTime <= 0 {
		toolsTime = rc.toolsAt.Sub(start)
	}
	ix.Tools = float64(b.o.Tools) / toolsTime.Seconds()
	ix.Rejected = rc.rejected
	reject := rc.firstReject
	rc.mu.Unlock()
	b.say("indexed: prompts %.0f/s, tools %.0f/s, %d rejected %s", ix.Prompts, ix.Tools, ix.Rejected, reject)
	if ix.Rejected > 0 {
		return fmt.Errorf("%d events rejected, e.g. %s", ix.Rejected, reject)
	}
	// Autovacuum would analyse the new rows soon; do it now, so plans
	// are those of a settled table.
	_, err = b.d.Pool.Exec(ctx, `ANALYZE prompts; ANALYZE tools; ANALYZE prompt_labels; ANALYZE index_tool_health; ANALYZE index_quality`)
	return err
}

// existing checks that the --search-only tenant holds the corpus of these
// options, and starts the indexer to serve it.
func (b *indexerBench) existing(ctx context.Context) error {
	var prompts, ids, tools int
	if err := b.d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM prompts WHERE tenant_id = $1),
  (SELECT count(DISTINCT id) FROM prompts WHERE tenant_id = $1), (SELECT count(*) FROM tools WHERE tenant_id = $1)`,
		b.tenant).Scan(&prompts, &ids, &tools); err != nil {
		return err
	}
	if prompts != b.o.Prompts || ids != b.o.PromptIDs || tools != b.o.Tools {
		return fmt.Errorf("--search-only: tenant %s holds %d prompts over %d ids and %d tools, not %d over %d and %d: give the options (and --seed) of the run that indexed it",
			b.tenant, prompts, ids, tools, b.o.Prompts, b.o.PromptIDs, b.o.Tools)
	}
	mon, err := nats.Connect(b.cfg.NATSURL, nats.Name("agentq-bench-indexer-monitor"))
	if err != nil {
		return err
	}
	defer mon.Close()
	runDone, err := b.startIndexers(ctx)
	if err != nil {
		return err
	}
	if _, err := b.serviceReady(ctx, mon, runDone); err != nil {
		b.stop()
		return err
	}
	b.say("tenant %s: %d prompts over %d ids and %d tools; the indexer serves it", b.tenant, prompts, ids, tools)
	return nil
}

// startIndexers starts the indexer copies: the first on the bench's own
// connections, each other on connections of its own, as separate processes
// would. runDone receives the first copy's end (a copy that stops on its
// own stops the others); b.stop stops them all.
func (b *indexerBench) startIndexers(ctx context.Context) (chan error, error) {
	ictx, cancel := context.WithCancel(ctx)
	deps := []*app.Deps{b.d}
	closeExtra := func() {
		for _, d := range deps[1:] {
			d.Close(context.WithoutCancel(ctx))
		}
	}
	for i := 2; i <= b.o.Copies; i++ {
		d, err := app.Start(ctx, b.cfg, fmt.Sprintf("bench-indexer-%d", i), b.log.Level(zerolog.WarnLevel))
		if err != nil {
			cancel()
			closeExtra()
			return nil, fmt.Errorf("indexer copy %d: %w", i, err)
		}
		deps = append(deps, d)
	}
	runDone := make(chan error, 1)
	var wg sync.WaitGroup
	for i, d := range deps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := app.Run(ictx, d, indexer.NewConsumer(indexer.Options{}))
			cancel() // a copy that stops on its own stops the others
			if i == 0 {
				runDone <- err
			}
		}()
	}
	b.stop = func() {
		cancel()
		wg.Wait()
		closeExtra()
	}
	return runDone, nil
}

// serviceReady waits until prompts.get answers on tenant, and returns when.
func (b *indexerBench) serviceReady(ctx context.Context, nc *nats.Conn, runDone chan error) (time.Time, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := service.Call(rctx, nc, search.GetSubject+"."+b.tenant, search.GetRequest{ID: "bench-ready-probe"}, nil)
		cancel()
		var serr *service.Error
		if errors.As(err, &serr) || err == nil {
			return time.Now(), nil
		}
		select {
		case err := <-runDone:
			return time.Time{}, fmt.Errorf("indexer stopped while starting: %v", err)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return time.Time{}, errors.New("the indexer's search service did not answer within 5 minutes")
		}
	}
}

// waitResults waits for done, failing when nothing arrives for 2 minutes
// or the indexer stops.
func waitResults(ctx context.Context, rc *resultCounter, done chan struct{}, runDone chan error, say func(string, ...any), what string) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case err := <-runDone:
			return fmt.Errorf("indexer stopped: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			rc.mu.Lock()
			p, t, last := rc.prompts, rc.tools, rc.last
			rc.mu.Unlock()
			say("%s: %d/%d prompts, %d/%d tools indexed", what, p, rc.promptsWant, t, rc.toolsWant)
			if time.Since(last) > 2*time.Minute {
				return fmt.Errorf("no result for 2 minutes: %d of %d prompts, %d of %d tools indexed (dead-lettered? see AGENTQ_DLQ)", p, rc.promptsWant, t, rc.toolsWant)
			}
		}
	}
}

// embedders measures each embedder alone on a sample of the texts, as the
// indexer calls it: one goroutine, one call per batch.
func (b *indexerBench) embedders(ctx context.Context) error {
	batch := b.res.BatchSize
	rate := func(e embed.Embedder, texts []string) (float64, error) {
		start := time.Now()
		for i := 0; i < len(texts); i += batch {
			if _, err := e.Embed(ctx, texts[i:min(i+batch, len(texts))]); err != nil {
				return 0, err
			}
		}
		return float64(len(texts)) / time.Since(start).Seconds(), nil
	}
	sample := func(e embed.Embedder, n int) int {
		if e.Model() == embed.LexicalModel {
			return min(n, 10000)
		}
		return min(n, 1000) // a model: a thousand texts say its rate
	}
	ix := &b.res.Indexing
	ix.PromptEmbedSamples = sample(b.pe, len(b.c.prompts))
	texts := make([]string, ix.PromptEmbedSamples)
	for i := range texts {
		texts[i] = b.c.promptText(i)
	}
	var err error
	if ix.PromptsEmbed, err = rate(b.pe, texts); err != nil {
		return err
	}
	ix.ToolEmbedSamples = sample(b.te, len(b.c.tools))
	texts = make([]string, ix.ToolEmbedSamples)
	for i := range texts {
		texts[i] = b.c.toolText(i)
	}
	if ix.ToolsEmbed, err = rate(b.te, texts); err != nil {
		return err
	}
	b.say("embedders alone: prompts %.0f/s (%s), tools %.0f/s (%s)", ix.PromptsEmbed, b.pe.Model(), ix.ToolsEmbed, b.te.Model())
	return nil
}

// --- the anchor: bare INSERT of the same rows ---

const (
	anchorPrompts = "agentq_bench_prompts"
	anchorTools   = "agentq_bench_tools"
	anchorHistory = "agentq_bench_tool_history"
)

// anchors reads back the rows the indexer stored and inserts them into
// copies of the tables, with the indexes of the originals, timing only the
// inserts.
func (b *indexerBench) anchors(ctx context.Context) error {
	drop := func() error {
		_, err := b.d.Pool.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+anchorPrompts+`, `+anchorTools+`, `+anchorHistory)
		return err
	}
	defer drop()
	ix := &b.res.Indexing
	for _, vectors := range []bool{false, true} {
		if err := drop(); err != nil {
			return err
		}
		for _, t := range [][2]string{{anchorPrompts, "prompts"}, {anchorTools, "tools"}, {anchorHistory, "tool_history"}} {
			if _, err := b.d.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING ALL)`, t[0], t[1])); err != nil {
				return err
			}
		}
		p, err := b.anchorPrompts(ctx, vectors)
		if err != nil {
			return err
		}
		t, err := b.anchorTools(ctx, vectors)
		if err != nil {
			return err
		}
		if vectors {
			ix.PromptsInsertVectors, ix.ToolsInsertVectors = p, t
		} else {
			ix.PromptsInsert, ix.ToolsInsert = p, t
		}
	}
	b.say("bare INSERT: prompts %.0f/s, with vectors %.0f/s; tools %.0f/s, with vectors %.0f/s",
		ix.PromptsInsert, ix.PromptsInsertVectors, ix.ToolsInsert, ix.ToolsInsertVectors)
	return nil
}

const promptInsertSQL = `INSERT INTO ` + anchorPrompts + ` (tenant_id, id, version, hash, type, name, description, content, parameters,
  tags, author, metadata, created_at, event_id, stream_seq, embedding, embedding_model, embedding_dim, current)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12::jsonb, $13, $14, $15, $16, $17, $18, true)`

// (current: every new version is served when it is inserted, so each row
// enters the partial HNSW index once, as with the indexer.)

// anchorPrompts inserts the tenant's prompts again and returns rows per
// second of insert time.
func (b *indexerBench) anchorPrompts(ctx context.Context, vectors bool) (float64, error) {
	read, err := b.d.Pool.Query(ctx, `SELECT tenant_id, id, version, hash, type, name, description, content, parameters::text,
  tags, author, metadata::text, created_at, event_id, stream_seq, embedding, embedding_model, embedding_dim
FROM prompts a WHERE tenant_id = $1 AND stream_seq <= coalesce(
  (SELECT stream_seq FROM prompts WHERE tenant_id = $1 ORDER BY stream_seq OFFSET $2::bigint - 1 LIMIT 1), 'Infinity'::float8)`, b.tenant, b.anchorLimit())
	if err != nil {
		return 0, err
	}
	defer read.Close()
	var rows [][]any
	var n int
	var spent time.Duration
	for read.Next() {
		vals, err := read.Values()
		if err != nil {
			return 0, err
		}
		row := []any{vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8], vals[9], vals[10], vals[11],
			vals[12], vals[13], vals[14], vals[15], vals[16], vals[17]}
		row[9] = strs(row[9]) // text[]: typed, for the exec protocol
		if !vectors {
			row[15], row[16], row[17] = nil, "", 0
		}
		if rows = append(rows, row); len(rows) == b.res.BatchSize {
			dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
				for _, r := range rows {
					bt.Queue(promptInsertSQL, r...)
				}
			})
			if err != nil {
				return 0, err
			}
			spent, n, rows = spent+dt, n+len(rows), rows[:0]
		}
	}
	if err := read.Err(); err != nil {
		return 0, err
	}
	if len(rows) > 0 {
		dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
			for _, r := range rows {
				bt.Queue(promptInsertSQL, r...)
			}
		})
		if err != nil {
			return 0, err
		}
		spent, n = spent+dt, n+len(rows)
	}
	if n == 0 || spent == 0 {
		return 0, errors.New("no prompts to insert")
	}
	b.res.Indexing.AnchorPrompts = n
	return float64(n) / spent.Seconds(), nil
}

// anchorTools inserts the tenant's tools again, each into the registry's
// two tables as registry.Put does, and returns tools per second.
func (b *indexerBench) anchorTools(ctx context.Context, vectors bool) (float64, error) {
	read, err := b.d.Pool.Query(ctx, `SELECT tenant_id, name, version, hash, description, input_schema::text, server, tags,
  registered_at, event_id, stream_seq, embedding, embedding_model, embedding_dim
FROM tools a WHERE tenant_id = $1 AND stream_seq <= coalesce(
  (SELECT stream_seq FROM tools WHERE tenant_id = $1 ORDER BY stream_seq OFFSET $2::bigint - 1 LIMIT 1), 'Infinity'::float8)`, b.tenant, b.anchorLimit())
	if err != nil {
		return 0, err
	}
	defer read.Close()
	const (
		hist = `INSERT INTO ` + anchorHistory + ` (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)`
		cur = `INSERT INTO ` + anchorTools + ` (tenant_id, name, version, hash, description, input_schema, server, tags, registered_at, event_id, stream_seq,
  embedding, embedding_model, embedding_dim) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14)`
	)
	var rows [][]any
	var n int
	var spent time.Duration
	flush := func() error {
		dt, err := b.insertBatch(ctx, func(bt *pgx.Batch) {
			for _, r := range rows {
				bt.Queue(hist, r[:11]...)
				bt.Queue(cur, r...)
			}
		})
		spent, n, rows = spent+dt, n+len(rows), rows[:0]
		return err
	}
	for read.Next() {
		vals, err := read.Values()
		if err != nil {
			return 0, err
		}
		row := slices.Clone(vals)
		row[7] = strs(row[7])
		if !vectors {
			row[11], row[12], row[13] = nil, "", 0
		}
		if rows = append(rows, row); len(rows) == b.res.BatchSize {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := read.Err(); err != nil {
		return 0, err
	}
	if len(rows) > 0 {
		if err := flush(); err != nil {
			return 0, err
		}
	}
	if n == 0 || spent == 0 {
		return 0, errors.New("no tools to insert")
	}
	b.res.Indexing.AnchorTools = n
	return float64(n) / spent.Seconds(), nil
}

// strs turns a text[] read by Values into []string.
func strs(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func (b *indexerBench) anchorLimit() int64 {
	if b.o.AnchorRows > 0 {
		return int64(b.o.AnchorRows)
	}
	return 1 << 40
}

// insertBatch sends BEGIN, the queued inserts and COMMIT as one pipelined
// round trip on a connection of its own, and returns how long it took.
func (b *indexerBench) insertBatch(ctx context.Context, queue func(*pgx.Batch)) (time.Duration, error) {
	conn, err := b.d.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	bt := &pgx.Batch{}
	bt.Queue(`BEGIN`)
	queue(bt)
	bt.Queue(`COMMIT`)
	start := time.Now()
	err = conn.SendBatch(ctx, bt).Close()
	return time.Since(start), err
}

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
		{"knn.prompts", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("prompts", pv[0])
			return func(ctx context.Context, i int) error {
				return b.bareKNN(ctx, sql, iterative, k.PromptK, pv[i%len(pv)])
			}
		}},
		{"fulltext.prompts", func(n int) func(context.Context, int) error {
			return func(ctx context.Context, i int) error { return b.bareFullText(ctx, search.EvalPrompts, pq[i%len(pq)]) }
		}},
		{"search.tools", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.ToolsRequest{Query: b.c.toolQuery(r)} })
			return func(ctx context.Context, i int) error {
				return call(search.ToolsSubject+"."+b.tenant, reqs[i], &toolTally)(ctx, i)
			}
		}},
		{"knn.tools", func(n int) func(context.Context, int) error {
			sql := b.knnSQL("tools", tv[0])
			return func(ctx context.Context, i int) error {
				return b.bareKNN(ctx, sql, iterative, k.ToolK, tv[i%len(tv)])
			}
		}},
		{"fulltext.tools", func(n int) func(context.Context, int) error {
			return func(ctx context.Context, i int) error { return b.bareFullText(ctx, search.EvalTools, tq[i%len(tq)]) }
		}},
		{"get", func(n int) func(context.Context, int) error {
			reqs := gen(n, func(r *rand.Rand) any { return search.GetRequest{ID: b.c.ids[r.IntN(len(b.c.ids))].id} })
			return func(ctx context.Context, i int) error {
				return call(search.GetSubject+"."+b.tenant, reqs[i], nil)(ctx, i)
			}
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
			SearchPrompts: med("search.prompts"), KNNPrompts: med("knn.prompts"), FullTextPrompts: med("fulltext.prompts"),
			SearchTools: med("search.tools"), KNNTools: med("knn.tools"), FullTextTools: med("fulltext.tools"),
			Get: med("get"), GetParams: med("get.params"), GetHot: med("get.hot"), Echo: med("echo"),
		}
		if c == 0 {
			s.Load = b.o.Load
		}
		s.PromptsRatioP50, s.PromptsRatioP99 = s.SearchPrompts.P50/s.KNNPrompts.P50, s.SearchPrompts.P99/s.KNNPrompts.P99
		s.ToolsRatioP50, s.ToolsRatioP99 = s.SearchTools.P50/s.KNNTools.P50, s.SearchTools.P99/s.KNNTools.P99
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
WHERE a.embedding_model = '%s' AND a.tenant_id IN ($1, '_global') %s
ORDER BY %s LIMIT $3`, keys, dist, table, strings.ReplaceAll(model, "'", "''"), filter, dist)
}

// bareKNN runs the kNN statement as search runs its statement: exec mode
// (a custom plan), in a read-only transaction with SET LOCAL ef_search
// (and iterative scan on pgvector 0.8+).
func (b *indexerBench) bareKNN(ctx context.Context, sql string, iterative bool, k int, v pgvector.Vector) error {
	return b.knnTx(ctx, iterative, k, false, func(tx pgx.Tx) error {
		return drain(tx.Query(ctx, sql, pgx.QueryExecModeExec, b.tenant, v, k))
	})
}

// knnTx runs f in a read-only transaction with the HNSW settings search
// uses for k candidates, and with index scans off when exact (the kNN
// statement then scans and sorts every served row).
func (b *indexerBench) knnTx(ctx context.Context, iterative bool, k int, exact bool, f func(pgx.Tx) error) error {
	ef := strconv.Itoa(max(b.res.EFSearch, k))
	return pgx.BeginTxFunc(ctx, b.d.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		set := `SELECT set_config('hnsw.ef_search', $1, true)`
		if iterative {
			set += `, set_config('hnsw.iterative_scan', 'relaxed_order', true)`
		}
		if exact {
			set += `, set_config('enable_indexscan', 'off', true)`
		}
		if _, err := tx.Exec(ctx, set, ef); err != nil {
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
		if n == 0 {
			return 0, nil
		}
		sql := b.knnSQL(table, vs[0])
		total := 0.0
		for _, v := range vs[:n] {
			approx, err := b.knnKeys(ctx, sql, iterative, k, v, false)
			if err != nil {
				return 0, err
			}
			exact, err := b.knnKeys(ctx, sql, iterative, k, v, true)
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
func (b *indexerBench) knnKeys(ctx context.Context, sql string, iterative bool, k int, v pgvector.Vector, exact bool) (map[string]bool, error) {
	keys := map[string]bool{}
	err := b.knnTx(ctx, iterative, k, exact, func(tx pgx.Tx) error {
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

func drain(rows pgx.Rows, err error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// runRequests makes n requests with conc clients in flight and returns
// their latency. Failed requests are counted, not timed; when all fail,
// the first error is returned.
func runRequests(ctx context.Context, n, conc int, do func(context.Context, int) error) (Latency, error) {
	rec := newRecorder(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				rec.run(ctx, i, time.Now(), do)
			}
		}()
	}
	wg.Wait()
	return rec.summary(ctx, time.Since(start))
}

// runAtRate makes n requests at rate per second in an open loop: request
// i is due at i/rate and starts then, however many are still waiting for
// their answers, and is timed from when it was due, so a slow answer
// neither delays the requests after it nor hides their wait (no
// coordinated omission). Failed requests are counted, not timed.
func runAtRate(ctx context.Context, n int, rate float64, do func(context.Context, int) error) (Latency, error) {
	if rate <= 0 {
		return Latency{}, fmt.Errorf("open loop: rate %g", rate)
	}
	rec := newRecorder(n)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec.run(ctx, i, due, do)
		}()
	}
	wg.Wait()
	return rec.summary(ctx, time.Since(start))
}

// recorder keeps the outcome of n requests, each written by one goroutine.
type recorder struct {
	lat      []time.Duration
	ok       []bool
	errs     atomic.Int64
	once     sync.Once
	firstErr error
}

func newRecorder(n int) *recorder {
	return &recorder{lat: make([]time.Duration, n), ok: make([]bool, n)}
}

// run makes request i and records its latency from since.
func (r *recorder) run(ctx context.Context, i int, since time.Time, do func(context.Context, int) error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := do(rctx, i)
	r.lat[i] = time.Since(since)
	if err != nil {
		r.errs.Add(1)
		r.once.Do(func() { r.firstErr = err })
		return
	}
	r.ok[i] = true
}

// summary turns the latencies of the requests that succeeded into a
// Latency; when all failed, it returns the first error.
func (r *recorder) summary(ctx context.Context, wall time.Duration) (Latency, error) {
	if err := ctx.Err(); err != nil {
		return Latency{}, err
	}
	var good []time.Duration
	for i, d := range r.lat {
		if r.ok[i] {
			good = append(good, d)
		}
	}
	if len(good) == 0 {
		return Latency{}, r.firstErr
	}
	slices.Sort(good)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{
		Requests: len(good), Errors: int(r.errs.Load()),
		P50: ms(good[len(good)/2]), P99: ms(good[min(len(good)-1, len(good)*99/100)]), Max: ms(good[len(good)-1]),
		Rate: float64(len(good)) / wall.Seconds(),
	}, nil
}

// medianLatency is the field-wise median of rounds; errors add up.
func medianLatency(ls []Latency) Latency {
	pick := func(f func(Latency) float64) float64 {
		xs := make([]float64, len(ls))
		for i, l := range ls {
			xs[i] = f(l)
		}
		return median(xs)
	}
	out := Latency{
		P50:  pick(func(l Latency) float64 { return l.P50 }),
		P99:  pick(func(l Latency) float64 { return l.P99 }),
		Max:  pick(func(l Latency) float64 { return l.Max }),
		Rate: pick(func(l Latency) float64 { return l.Rate }),
	}
	for _, l := range ls {
		out.Requests += l.Requests
		out.Errors += l.Errors
	}
	out.Requests /= max(1, len(ls))
	return out
}

// --- the generated corpus ---

// benchFunctionWords head the vocabulary: in English text they are the
// most frequent words, and full-text search and the lexical embedder drop
// them.
var benchFunctionWords = strings.Fields(`the of and to a in is for that with on as be it this by or
from at an are your you if not each when then into`)

var benchParams = []library.Param{
	{Name: "Topic", Type: "string", Required: true, Description: "What the answer is about."},
	{Name: "Audience", Type: "string", Default: "engineers", Description: "Who reads the answer."},
	{Name: "MaxWords", Type: "integer", Default: float64(150), Description: "Longest answer in words."},
	{Name: "Language", Type: "string", Default: "English", Description: "Language of the answer."},
	{Name: "Input", Type: "string", Required: true, Description: "The text to work on."},
	{Name: "Formal", Type: "boolean", Default: false, Description: "Whether to answer formally."},
}

type benchID struct {
	id, name, typ, description string
	tags                       []string
	params                     []library.Param
	values                     map[string]any
	tokens                     []string // the latest version's content, words and {{.Param}} markers
}

type benchPromptEv struct {
	id      int // index in ids
	content string
}

type benchToolEv struct {
	name, description, server string
	tags                      []string
	schema                    map[string]any
}

type benchCorpus struct {
	words   []string // by rank: function words first
	fn      int      // how many function words
	zipf    *rand.Zipf
	r       *rand.Rand
	ids     []benchID
	prompts []benchPromptEv // publish order
	tools   []benchToolEv
}

func newBenchCorpus(o IndexerBenchOptions) *benchCorpus {
	c := &benchCorpus{words: append(slices.Clone(benchFunctionWords), strings.Fields(benchVocabulary)...), fn: len(benchFunctionWords)}
	c.r = rand.New(rand.NewPCG(o.Seed, 1))
	c.zipf = rand.NewZipf(c.r, 1.07, 2, uint64(len(c.words)-1))
	tags := c.words[c.fn : c.fn+60]
	for i := range o.PromptIDs {
		id := benchID{
			id: fmt.Sprintf("%s-%s-%d", c.content(), c.content(), i), typ: library.Types[c.r.IntN(len(library.Types))],
			values: map[string]any{},
		}
		id.name = strings.Join([]string{c.content(), c.content(), c.content()}, " ")
		id.description = c.sentence(8, 16)
		for range 1 + c.r.IntN(3) {
			if t := tags[c.r.IntN(len(tags))]; !slices.Contains(id.tags, t) {
				id.tags = append(id.tags, t)
			}
		}
		for _, j := range c.r.Perm(len(benchParams))[:1+c.r.IntN(3)] {
			p := benchParams[j]
			id.params = append(id.params, p)
			switch p.Type {
			case "integer":
				id.values[p.Name] = 80 + c.r.IntN(200)
			case "boolean":
				id.values[p.Name] = c.r.IntN(2) == 0
			default:
				id.values[p.Name] = c.sentence(2, 5)
			}
		}
		id.tokens = c.promptTokens(100+c.r.IntN(51), id.params)
		c.ids = append(c.ids, id)
	}
	for i := range o.Prompts {
		j := i % o.PromptIDs
		if i >= o.PromptIDs {
			c.ids[j].tokens = c.edit(c.ids[j].tokens)
		}
		c.prompts = append(c.prompts, benchPromptEv{id: j, content: strings.Join(c.ids[j].tokens, " ")})
	}
	servers := make([]string, 50)
	for i := range servers {
		servers[i] = "mcp-" + c.content()
	}
	for i := range o.Tools {
		t := benchToolEv{
			name:        fmt.Sprintf("%s_%s_%d", c.content(), c.content(), i),
			description: c.sentence(10, 25),
			server:      servers[c.r.IntN(len(servers))],
			tags:        []string{tags[c.r.IntN(len(tags))]},
			schema:      map[string]any{"type": "object", "properties": map[string]any{}},
		}
		props := t.schema["properties"].(map[string]any)
		for range 1 + c.r.IntN(3) {
			props[c.content()] = map[string]any{"type": "string", "description": c.sentence(3, 8)}
		}
		c.tools = append(c.tools, t)
	}
	return c
}

// word draws a word by rank, function words included.
func (c *benchCorpus) word() string { return c.words[c.zipf.Uint64()] }

// content draws a word that is not a function word.
func (c *benchCorpus) content() string {
	for {
		if i := int(c.zipf.Uint64()); i >= c.fn {
			return c.words[i]
		}
	}
}

func (c *benchCorpus) sentence(lo, hi int) string {
	n := lo + c.r.IntN(hi-lo+1)
	w := make([]string, n)
	for i := range w {
		w[i] = c.word()
	}
	w[0] = strings.ToUpper(w[0][:1]) + w[0][1:]
	return strings.Join(w, " ") + "."
}

// promptTokens is a prompt of about n words in sentences, with a
// {{.Name}} sentence for each parameter.
func (c *benchCorpus) promptTokens(n int, params []library.Param) []string {
	var out []string
	for len(out) < n {
		out = append(out, strings.Fields(c.sentence(8, 20))...)
	}
	for _, p := range params {
		at := c.r.IntN(len(out))
		out = slices.Insert(out, at, p.Name+":", "{{."+p.Name+"}}.")
	}
	return out
}

// edit is the next version: about one word in ten replaced.
func (c *benchCorpus) edit(tokens []string) []string {
	out := slices.Clone(tokens)
	for range max(1, len(out)/10) {
		i := c.r.IntN(len(out))
		if strings.Contains(out[i], "{{") || strings.HasSuffix(out[i], ":") {
			continue
		}
		w := c.word()
		if strings.HasSuffix(out[i], ".") {
			w += "."
		}
		out[i] = w
	}
	return out
}

func (c *benchCorpus) meanWords() float64 {
	total := 0
	for _, p := range c.prompts {
		total += len(strings.Fields(p.content))
	}
	return float64(total) / float64(max(1, len(c.prompts)))
}

func (c *benchCorpus) promptData(i int) map[string]any {
	p := c.prompts[i]
	id := c.ids[p.id]
	return map[string]any{
		"id": id.id, "type": id.typ, "name": id.name, "description": id.description, "content": p.content,
		"parameters": id.params, "tags": id.tags, "author": "agentq-bench",
	}
}

func (c *benchCorpus) toolData(i int) map[string]any {
	t := c.tools[i]
	return map[string]any{"name": t.name, "description": t.description, "server": t.server, "tags": t.tags, "input_schema": t.schema}
}

// promptText and toolText are what the indexer embeds.
func (c *benchCorpus) promptText(i int) string {
	p := c.prompts[i]
	id := c.ids[p.id]
	return strings.Join([]string{id.name, id.description, strings.Join(id.tags, " "), p.content}, ". ")
}

func (c *benchCorpus) toolText(i int) string {
	t := c.tools[i]
	return strings.Join([]string{strings.ReplaceAll(t.name, "_", " "), t.description, strings.Join(t.tags, " ")}, ". ")
}

// promptQuery and toolQuery are search queries: four in ten a few words
// of the corpus, three in ten a quote of a text, three in ten a
// paraphrase-like rewrite of one (some words replaced, function words
// dropped, two words swapped).
func (c *benchCorpus) promptQuery(r *rand.Rand) string {
	id := c.ids[r.IntN(len(c.ids))]
	return c.query(r, strings.Join(id.tokens, " ")+" "+id.description)
}

func (c *benchCorpus) toolQuery(r *rand.Rand) string {
	t := c.tools[r.IntN(len(c.tools))]
	return c.query(r, t.description)
}

func (c *benchCorpus) query(r *rand.Rand, text string) string {
	var words []string
	for _, w := range strings.Fields(text) {
		if w = strings.ToLower(strings.Trim(w, ".:")); w != "" && !strings.Contains(w, "{{") {
			words = append(words, w)
		}
	}
	pick := func() string {
		// The shared zipf draws from c.r; queries use r (their own
		// stream) over the same ranks, roughly Zipf by rejection.
		for {
			i := r.IntN(len(c.words))
			if i >= c.fn && r.Float64() < 1/(1+float64(i-c.fn)/20) {
				return c.words[i]
			}
		}
	}
	switch k := r.IntN(10); {
	case k < 4 || len(words) < 12:
		n := 2 + r.IntN(3)
		q := make([]string, n)
		for i := range q {
			q[i] = pick()
		}
		return strings.Join(q, " ")
	case k < 7:
		n := 4 + r.IntN(5)
		at := r.IntN(len(words) - n)
		return strings.Join(words[at:at+n], " ")
	default:
		n := 6 + r.IntN(5)
		at := r.IntN(len(words) - n)
		var q []string
		for _, w := range words[at : at+n] {
			if slices.Contains(benchFunctionWords, w) {
				continue
			}
			if r.IntN(3) == 0 {
				w = pick()
			}
			q = append(q, w)
		}
		if len(q) > 2 {
			i := r.IntN(len(q) - 1)
			q[i], q[i+1] = q[i+1], q[i]
		}
		if len(q) == 0 {
			q = append(q, pick())
		}
		return strings.Join(q, " ")
	}
}

// benchVocabulary is the words of internal/embed/testdata (agentq's
// retrieval evaluation sets) by how often they occur there, most first.
const benchVocabulary = `list line get two message write file use user sql day customer create words time summary question
number change below return pull every code article request read only items how first using sentence
most email does date data three such search never keep issue give explain example describe
complaint changes why table problem new total test team path notes must exactly diff columns body
add action unit under suggest run review resume reply release make invoice index given fixes draft
document dates cover check travel tone tests support show should short security schema requests
recipe price over output other open names made incident image hundred fields field calendar between
answer about users ticket send refund postmortem posting order next meeting main look letter
itinerary http function endpoint end database currency commit api writer within whole whether well
web version tutor translate steps small shell service same rather provided points point object
numbers needs leave include followed five find directory command classify cause ask applied went
weather transcript subject student start slow seventy set rows result priority postgresql plan
plain owner off note merge local language label injection github fragment follow files error days
could convert client cases call busy budget breaking audio amount zero where were weak values
transcribe timeline term tables supplier subtotal stock stays states speech source slack sentences
root rewrite restart resize report reminder rating rate put production prevent prefer polish
payment paragraphs optimise normal news more mistake mentions mention matters math many low long
logs link large just job item invent input ingredients ingredient impact guess group generator
forecast flights flight fix finish finding final fifty fail extraction evidence events event
estimated escalation escalate empty due directions dependency delete define cpu cost contains
confidence concrete common comment column close clear claim choose cannot candidate bug book
behaviour avoid authentication appear already agent after address act wrong whys waiting vegetarian
vat types twelve traversal transport top terminal tell technical supervisor summarize subscription
specific shared secrets say running response replacement remove range races public promises openapi
online offer ocr neutral mood metrics matching maps log leftovers leak late last instead inbox
imperative human history hint headline hard guide goroutines geocode fridge features extract euros
escalated errors edge driven disk dinner design damaged current curl covering concise checklist
chat characters cancel calculator business break blameless billing before base back arrived
application another analyze adding achievements writes wrapped works worker work without whose
while whichever warnings warm vulnerable vulnerabilities view very utc uses used urgent upgrade
updated unless unknown units unicode understood unchecked type turn try true tried traveller
tracking totals today title tip times tickets through threatens thank tense temporary tax talk
system supports summarise substituting subqueries submitted structured strong strings string
straight storage stopping step stay status statistics stating statement stated state starts staged
spill specification specialist sorts something solves snippet smallest slower slightly sleep skills
single since similar sign sights side shown shop share several servings server sequential separator
separate sensational senior sections secondary screen scope school schedule scans scanning
satisfied salt safety safe rule row role rewritten reviewing restriction restaurant restate
responsible respond respectful respect resolved requirements required repository reports reported
replace repeated repeat remediation relaxed referring reference refactors reduce recommend
recipient reasonable reason realistic real reader reaching reach ranges raised quoting quote
quieter questions quantity quantities qualify purpose prose propose promise professional process
presents predicate praise practice polite policy player planner placeholder pick person performance
people patient paths paste past password passed parameterised parameter pantry page packages
package own overview outcome otherwise options opinions opening ones oil often nut numbered null
nouns notice nothing normalise nobody nitpicks nested negative named morning modest moderate mock
mitigations missing mismatch misestimated misconception migration metric method messages merged
mentioned medium measurable meal mathematics matches match march manager loops longer limits limit
likelihood like length legal leaving least know keys keeping joins joining jargon itself issues iso
involved interview interpretation internal interfaces interested injury individuals indexed
improvements improvement improved imports important hour hope honestly highlight higher high helps
headings hazard hashes hardening happened handlers half groups grand gluten gives git garlic
functions friendly free four format formal foreign flour fits fit finds filter filler figures
fenced feature fast false failure factual facts fact extra exported exploitation exploit explicit
explains explaining exist executive execute exceeds examine exact evening estimating estimate
engineer during duration down double dot documented documentation distinguish dispute disabling
difficulty dietary developer details destination descriptive descriptions describing described
delivery defined default declared decisions decision decimal decided decide cryptography critical
counts correctness correcting cooking conversations contexts context contents containing contacted
contact consumed confident condition concatenation component complete compiling company committed
commitments colon colleague clich cites chosen choice checks checking changed catch case carefully
capture calls buy bumps bullet breaks breach both booked blocking block blank blame bill behind
beginner begin balance away authorization author auditor attribute attend attacker attack
assumption assert asks asking array appropriate appears apologise apart anything answered amounts
ambiguous alone allowed allow allergy alias against afternoon affected advance adopt adjectives
activities absence above able zone yesterday yaml worth wording width wide weekend week ways
warehouse wants walking voice usage url urgently upcoming unbiased txt tuesday transit trading
tonight tomorrow tokyo titles ticker temperature teach takes synthesize symbol sunny subdirectories
street story stdout stderr staff spoken someone solutions snippets smaller signed shopper ship
sender seat scanned save sandbox route room right results rest reserve repo recording recipients
recent receipt recap rates raining quarterly prs project produce processor printed press post
podcast planes plane places pixels ping picks photo permanently percent pattern passenger part
parse paris parcel paragraph overwriting overloaded outage orders old numeric now notification
night nginx multi much money mom missed minutes memory meetings market mailed mailbox mail madrid
machine longitude login location load lisbon lax latitude latest lat land jfk inside indexes
incoming improve idea hours hotel host holiday helpdesk help height handwritten handing hacker
grouped grep golang giving gist generate friday french folder filesystem fetch faster expression
experienced exit existing exchange everyone evaluate episode entries english election driving drive
download downing done dollars did desk deploy daemon currencies creating crash coordinates cook
control consulting config conditions compute com colleagues coded clearer city channel changelog
card caller branch bounce berlin backup available attendees arithmetic archive approved apply app
angry analytics aloud alice algebra airports airport airline aapl`
