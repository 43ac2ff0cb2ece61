package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/indexer"
)

func init() {
	register("reindex", "re-embed prompts and tools after an embedding model change, in place, with progress", runReindex)
	describe("reindex", "[--tenant T] [--all] [--batch N] [--json]", `Re-embeds the prompts and tools whose vector is of another model than the one
in force (AGENTQ_EMBED_*: the provider, or the built-in embedders chosen by
AGENTQ_EMBED_PROMPTS and AGENTQ_EMBED_TOOLS), or that have none, and creates
the model's vector index. Nothing else changes and the indexers keep running;
until a row is re-embedded, search finds it by its words only. --all
re-embeds every row. Run it after changing the model, with the same
configuration as the indexers.`)
}

func runReindex(ctx context.Context, e Env, cfg config.Config, log zerolog.Logger, args []string) error {
	fs := flags("reindex", e)
	tenant := fs.String("tenant", "", "only this tenant (default: every tenant)")
	all := fs.Bool("all", false, "re-embed every row, not only those of another model")
	batch := fs.Int("batch", 64, "rows per embedding call")
	asJSON := fs.Bool("json", false, "print the report as JSON (progress still goes to stderr)")
	if err := fs.Parse(args); err != nil {
		return parseError(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.Stderr, "agentq reindex: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	dbURL, err := databaseURL(e, cfg)
	if err != nil {
		return err
	}
	if err := database.Migrate(ctx, dbURL, log); err != nil {
		return err
	}
	pool, err := database.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	emb, release, err := indexer.OpenEmbedders(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer release()
	bar := newBar(e.Stderr)
	rep, err := indexer.Reindex(ctx, pool, emb, indexer.ReindexOptions{Tenant: *tenant, All: *all, BatchSize: *batch,
		Progress: bar.update, Indexes: indexer.SearchOptions(cfg.Search).Indexes()})
	bar.finish()
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, reindexReport{Prompts: rep.Prompts, Tools: rep.Tools, PromptModel: rep.PromptModel, ToolModel: rep.ToolModel,
			SkippedPrompts: rep.SkippedPrompts, SkippedTools: rep.SkippedTools, DroppedIndexes: rep.DroppedIndexes, TookMS: rep.Took.Milliseconds()})
	}
	fmt.Fprintf(e.Stdout, "re-embedded %d prompts with %s and %d tools with %s in %s\n",
		rep.Prompts, rep.PromptModel, rep.Tools, rep.ToolModel, rep.Took.Round(time.Millisecond))
	for _, n := range rep.DroppedIndexes {
		fmt.Fprintf(e.Stdout, "  dropped vector index %s: its model's vectors now have another dimension\n", n)
	}
	if rep.SkippedPrompts+rep.SkippedTools > 0 {
		fmt.Fprintf(e.Stdout, "  %d prompts and %d tools the model refused (no letters or digits): found by full text only\n",
			rep.SkippedPrompts, rep.SkippedTools)
	}
	return nil
}

// reindexReport is reindex's --json output.
type reindexReport struct {
	Prompts        int      `json:"prompts"`
	Tools          int      `json:"tools"`
	PromptModel    string   `json:"prompt_model"`
	ToolModel      string   `json:"tool_model"`
	SkippedPrompts int      `json:"skipped_prompts"`
	SkippedTools   int      `json:"skipped_tools"`
	DroppedIndexes []string `json:"dropped_indexes,omitempty"`
	TookMS         int64    `json:"took_ms"`
}

// bar draws a progress bar per kind on a terminal, else a line each 10%.
type bar struct {
	w     io.Writer
	tty   bool
	kind  string
	last  time.Time
	tenth int
}

func newBar(w io.Writer) *bar {
	b := &bar{w: w}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		b.tty = true
	}
	return b
}

func (b *bar) update(kind string, done, total int) {
	if kind != b.kind {
		b.finish()
		b.kind, b.tenth = kind, -1
	}
	if total == 0 {
		fmt.Fprintf(b.w, "%s: nothing to re-embed\n", kind)
		b.kind = ""
		return
	}
	if !b.tty {
		if t := done * 10 / total; t != b.tenth {
			b.tenth = t
			fmt.Fprintf(b.w, "%s: %d/%d (%d%%)\n", kind, done, total, done*100/total)
		}
		return
	}
	if done < total && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	const width = 30
	n := done * width / total
	fmt.Fprintf(b.w, "\r%-8s [%s%s] %d/%d", kind, strings.Repeat("#", n), strings.Repeat(".", width-n), done, total)
}

func (b *bar) finish() {
	if b.tty && b.kind != "" {
		fmt.Fprintln(b.w)
	}
	b.kind = ""
}
