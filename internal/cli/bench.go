package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bench"
	"github.com/agentq/agentq/internal/config"
)

// agentq bench, bench indexer, bench degrader and bench client: flags,
// usage and the call; what is measured, against what, and the tables are internal/bench's.

func init() {
	register("bench", "load generator: raw JetStream consume+ack vs the scorer end to end, in one run", runBench)
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
  embedder alone on one new query, the bare SQL kNN query (same filter,
  model, K and ef_search, SET LOCAL in a read-only transaction), the bare
  full-text arm, and both bare arms at once on two connections (the
  database work of a search running its arms apart) on the same database.
  prompts.get asks for ids drawn from every prompt id (mostly answered from
  the database), beside the bare statement it runs on a cache miss, then
  for 100 hot ids (mostly from the indexer's cache), beside a bare NATS
  request/reply of the same size. Then each of these again
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

func runBench(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	if len(args) > 0 && args[0] == "indexer" {
		return runBenchIndexer(ctx, e, cfg, log, args[1:])
	}
	if len(args) > 0 && args[0] == "degrader" {
		return runBenchDegrader(ctx, e, cfg, log, args[1:])
	}
	if len(args) > 0 && args[0] == "client" {
		return runBenchClient(ctx, e, cfg, log, args[1:])
	}
	if len(args) > 0 && args[0] == "ingest" {
		return runBenchIngest(ctx, e, cfg, log, args[1:])
	}
	fs := flags("bench", e)
	n := fs.Int("events", 20000, "events per phase")
	rounds := fs.Int("rounds", 3, "rounds of raw + scorer; medians are reported")
	batch := fs.Int("batch", cfg.Runner("scorer").BatchSize, "scorer batch size (events per transaction)")
	light := fs.Int("light", 50, "single events published one at a time for the light-traffic latency")
	verbose := fs.Bool("v", false, "print per-round diagnostics (handler time per batch)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
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
	if *n < 1 || *rounds < 1 {
		return fmt.Errorf("--events and --rounds must be positive")
	}
	cfg = withScorerBatch(cfg, *batch)
	o := bench.ScorerOptions{Events: *n, Rounds: *rounds, Light: *light}
	if *verbose {
		o.Diagnostics = e.Stderr
	}
	res, err := bench.Scorer(ctx, cfg, o, log)
	if err != nil {
		return err
	}
	res.Print(e.Stdout)
	return nil
}

func runBenchIndexer(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench indexer", e)
	var o bench.IndexerOptions
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
	progress := benchProgress(e, *verbose)
	res, err := bench.Indexer(ctx, cfg, o, progress, log)
	if err != nil {
		return err
	}
	return printBench(e, *asJSON, res)
}

func init() {
	describe("bench client", "[--requests N] [--cold N] [--clients N] [--moves N] [--poll D] [--json]",
		`Measures the Go client package (client/) against an indexer in process, an
embedded NATS server and the database at AGENTQ_DATABASE_URL (native Postgres
for figures that mean anything; the PGlite dev database otherwise):

  GetPrompt answered from the client's cache and rendered, beside the same
  rendering alone; GetPrompt with the cache off, answered from the
  indexer's memory, beside a bare NATS request/reply of the same size; and
  the first GetPrompt of --cold ids, which the indexer reads from the
  database;

  label moves: --clients clients connected, each with the prompt cached;
  production is moved --moves times, and each client calls GetPrompt every
  --poll until it returns the new version: the time from the indexer's
  prompt.indexed result (as a plain subscriber hears it), and from
  publishing prompt.activated, to each client serving the new version,
  beside one core NATS message fanned out to as many plain connections that
  each make a bare request/reply.

p50/p99 over every sample. Each run writes a tenant of its own.`)
}

func runBenchClient(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench client", e)
	var o bench.ClientOptions
	fs.IntVar(&o.Requests, "requests", 20000, "GetPrompt calls per hit and miss measurement")
	fs.IntVar(&o.Cold, "cold", 500, "prompt ids fetched once each (first gets)")
	fs.IntVar(&o.Clients, "clients", 50, "clients connected during the label moves")
	fs.IntVar(&o.Moves, "moves", 20, "label moves")
	fs.DurationVar(&o.Poll, "poll", time.Millisecond, "how often each client calls GetPrompt while a move is under way")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	verbose := fs.Bool("v", false, "print progress")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if o.Requests < 1 || o.Cold < 1 || o.Clients < 1 || o.Moves < 1 || o.Poll <= 0 {
		return usageError(e, fs, "bench client", "--requests, --cold, --clients, --moves and --poll must be positive")
	}
	progress := benchProgress(e, *verbose)
	res, err := bench.Client(ctx, cfg, o, progress, log)
	if err != nil {
		return err
	}
	return printBench(e, *asJSON, res)
}

func runBenchDegrader(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("bench degrader", e)
	tools := fs.Int("tools", 1000, "tools of the tenant, each with a history of successful calls")
	samples := fs.Int("samples", 200, "tools broken one after another (at most half the tools: the share cap)")
	gap := fs.Duration("gap", 20*time.Millisecond, "pause between calls: light traffic")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if *samples > *tools/2 {
		return usageError(e, fs, "bench degrader", "--samples %d: at most half of --tools (the share cap)", *samples)
	}
	r, err := bench.Degrader(ctx, cfg, bench.DegraderOptions{Tools: *tools, Samples: *samples, Gap: *gap}, log)
	if err != nil {
		return err
	}
	r.Print(e.Stdout)
	return nil
}

// printBench prints a benchmark's result as its table, or as indented JSON.
func printBench(e Env, asJSON bool, res interface{ Print(io.Writer) }) error {
	if asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	res.Print(e.Stdout)
	return nil
}

// benchProgress is where a benchmark reports progress: stderr with -v.
func benchProgress(e Env, verbose bool) io.Writer {
	if verbose {
		return e.Stderr
	}
	return io.Discard
}
