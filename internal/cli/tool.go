package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
)

// This file holds agentq tool (register, search); what it shares with
// agentq prompt is in prompt.go (dispatch), entries.go (reading files),
// catalog.go (publishing) and promptview.go (searchCall).

func init() {
	register("tool", "the tool registry: register tools, search them, see their health, release a quarantine", runTool)
	describe("tool", "register|search|health|release [args] [flags]", `Works with the tool registry the indexer keeps. Tools are registered as
tool.registered events, like any agent would; search is the request/reply
call agents make (search.tools.<tenant>).

The tenant is --tenant, else AGENTQ_TENANT, else "default".`)
	describe("tool register", "FILE|DIR|- [--tenant T] [--timeout D] [--json]\n   or: agentq tool register --name NAME --description TEXT [--server S] [--tag X ...] [--schema-file FILE]", `Publishes tool definitions as tool.registered events, waits for the
indexer's answer to each and prints a summary: created (a new definition or
a new version of a changed one), unchanged (the same definition was already
registered), rejected (with the indexer's reason), or no answer within
--timeout. Exits 1 if any tool was rejected or unanswered.

The definitions come from FILE (YAML or JSON; "-" reads stdin), from every
*.yaml, *.yml and *.json file in DIR (sorted by name), or, for a single
tool, from the flags. A file holds one tool (a mapping) or a list of them,
each with the fields of tool.registered: name, description, and optionally
input_schema (a JSON Schema object), server and tags. Every definition is
checked against the tool.registered schema before anything is published.

As with agentq prompt seed, registering the same definitions twice within
the stream's duplicate window publishes nothing new (each is reported
unchanged, with what the earlier register got); later they are answered
"unchanged" by the indexer.`)
	describe("tool search", "QUERY [--limit N] [--exclude NAME ...] [--min-quality Q] [--json]", `Searches the tool registry (search.tools.<tenant>): the tenant's tools and
the _global ones, by meaning and by words, re-ranked by quality, recency and
usage; quarantined tools are never returned. Prints a table, best first,
with each tool's health, score and the components it is made of, and how
the candidates were retrieved: when search fell back to words alone (the
embedding provider is down) it says it is degraded, and why.`)
}

var toolSubcommands = []subcommand{
	{"register", "publish tool definitions from files or flags and report what the indexer made of each", runToolRegister},
	{"search", "search tools by meaning and words; a ranked table with health and score components", runToolSearch},
	{"health", "every tool's health as the degrader sees it: state, quality, baseline, evidence, offences", runToolHealth},
	{"release", "lift a tool's quarantine (tool.released) and wait for the degrader's answer", runToolRelease},
}

func runTool(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	return runGroup(ctx, e, cfg, "tool", toolSubcommands, args)
}

var toolCatalog = catalog{
	noun: "tool", eventType: indexer.TypeToolRegistered, okType: indexer.TypeToolIndexed,
	label: func(en entry) string {
		if n := en.str("name"); n != "" {
			return "(" + n + ")"
		}
		return ""
	},
}

func runToolRegister(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "tool register"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	toolName := fs.String("name", "", "register one tool with this name (instead of FILE)")
	description := fs.String("description", "", "with --name: what the tool does, in plain language")
	server := fs.String("server", "", "with --name: server or namespace that provides the tool, e.g. an MCP server")
	var tags listFlag
	fs.Var(&tags, "tag", "with --name: a tag; repeatable")
	schemaFile := fs.String("schema-file", "", "with --name: YAML or JSON file holding the JSON Schema of the tool's input")
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answers after publishing")
	asJSON := fs.Bool("json", false, "print JSON: counts and every tool's outcome")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	single := *toolName != "" || *description != "" || *server != "" || len(tags) > 0 || *schemaFile != ""
	switch {
	case len(pos) > 1:
		return usageError(e, fs, name, "one FILE, DIR or -, got %d arguments", len(pos))
	case len(pos) == 1 && single:
		return usageError(e, fs, name, "give FILE or the flags of one tool (--name ...), not both")
	case len(pos) == 0 && !single:
		return usageError(e, fs, name, "FILE, DIR or - is required, or --name and --description for one tool")
	case single && (*toolName == "" || *description == ""):
		return usageError(e, fs, name, "one tool needs --name and --description")
	case *timeout <= 0:
		return usageError(e, fs, name, "--timeout must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	var ens []entry
	if single {
		en, err := toolFromFlags(*toolName, *description, *server, tags, *schemaFile)
		if err != nil {
			return err
		}
		ens = []entry{en}
	} else if ens, err = loadEntries(e, pos[0]); err != nil {
		return err
	}
	return publishCatalog(ctx, e, cfg, toolCatalog, *tenant, ens, *timeout, *asJSON)
}

// toolFromFlags builds the entry of agentq tool register --name ....
func toolFromFlags(name, description, server string, tags []string, schemaFile string) (entry, error) {
	data := map[string]any{"name": name, "description": description}
	if server != "" {
		data["server"] = server
	}
	if len(tags) > 0 {
		t := make([]any, len(tags))
		for i, s := range tags {
			t[i] = s
		}
		data["tags"] = t
	}
	if schemaFile != "" {
		raw, err := os.ReadFile(schemaFile)
		if err != nil {
			return entry{}, fmt.Errorf("--schema-file: %w", err)
		}
		ens, err := parseEntries(schemaFile, raw, strings.EqualFold(filepath.Ext(schemaFile), ".json"))
		if err != nil {
			return entry{}, fmt.Errorf("--schema-file: %w", err)
		}
		if len(ens) != 1 {
			return entry{}, fmt.Errorf("--schema-file %s: want one JSON Schema object, got %d", schemaFile, len(ens))
		}
		data["input_schema"] = ens[0].data
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return entry{}, err
	}
	return entry{source: "flags", index: 1, data: data, raw: raw}, nil
}

// toolView is a tool as search.tools returns it.
type toolView struct {
	Name         string   `json:"name"`
	Description  string   `json:"description"`
	Server       string   `json:"server"`
	Tags         []string `json:"tags"`
	Version      int      `json:"version"`
	Tenant       string   `json:"tenant"`
	State        string   `json:"state"`
	QualityScore *float64 `json:"quality_score"`
}

func runToolSearch(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "tool search"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	limit := fs.Int("limit", 0, "most results, 1 to 100 (default: the service's)")
	var exclude listFlag
	fs.Var(&exclude, "exclude", "leave this tool out (e.g. one already tried); repeatable")
	minQuality := fs.Float64("min-quality", -1, "only tools whose quality score is at least this, 0 to 1")
	timeout := fs.Duration("timeout", requestTimeout, "how long to wait for the reply")
	asJSON := fs.Bool("json", false, "print the reply as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError(e, fs, name, "a QUERY is required")
	case *limit < 0 || *limit > 100:
		return usageError(e, fs, name, "--limit must be 1 to 100")
	case *minQuality > 1 || (*minQuality < 0 && *minQuality != -1):
		return usageError(e, fs, name, "--min-quality must be 0 to 1")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	req := map[string]any{"query": strings.Join(pos, " ")}
	if *limit > 0 {
		req["limit"] = *limit
	}
	if len(exclude) > 0 {
		req["exclude_names"] = []string(exclude)
	}
	if *minQuality >= 0 {
		req["min_quality"] = *minQuality
	}
	reply, done, err := searchCall[struct {
		Tool       toolView   `json:"tool"`
		Score      float64    `json:"score"`
		Components components `json:"components"`
	}](ctx, e, cfg, "search.tools."+*tenant, *timeout, req, *asJSON)
	if done || err != nil {
		return err
	}
	if len(reply.Results) == 0 {
		fmt.Fprintln(e.Stdout, "no tools match")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tTOOL\tSERVER\tSTATE\tSCORE\tSIMILARITY\tQUALITY\tRECENCY\tUSAGE\tDESCRIPTION")
	for i, r := range reply.Results {
		t := r.Tool
		tool := t.Name
		if t.Tenant == bus.GlobalTenant {
			tool += " (" + bus.GlobalTenant + ")"
		}
		server, state := orDash(t.Server), orDash(t.State)
		c := r.Components
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\n", i+1, tool, server, state, r.Score,
			c.Similarity, c.Quality, c.Recency, c.Usage, truncateText(t.Description, 60))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
