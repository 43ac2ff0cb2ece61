package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
)

// This file holds agentq prompt's dispatch (shared with agentq tool,
// tool.go), seed and activate; get and search are in promptview.go,
// reading catalog entries from YAML and JSON files in entries.go, and
// publishing a catalog (event ids, the indexer's answers) in catalog.go.

// Defaults of the catalog commands' --timeout.
const (
	answerTimeout  = 60 * time.Second // seed, register, activate: waiting for the indexer
	requestTimeout = 10 * time.Second // get, search: one request/reply call
)

func init() {
	register("prompt", "the prompt library: seed prompts from files, get (rendered), search, activate a version", runPrompt)
	describe("prompt", "seed|get|search|activate [args] [flags]", `Works with the prompt library the indexer keeps. Prompts are added as
prompt.created events and labels moved with prompt.activated events, like
any agent would; get and search are the request/reply calls agents make
(prompts.get.<tenant>, search.prompts.<tenant>).

The tenant is --tenant, else AGENTQ_TENANT, else "default".`)
	describe("prompt seed", "FILE|DIR [--tenant T] [--timeout D] [--json]", `Publishes every prompt of FILE (YAML or JSON; "-" reads stdin) or of every
*.yaml, *.yml and *.json file in DIR (sorted by name) as a prompt.created
event, waits for the indexer's answer to each and prints a summary:
created, unchanged (the same version was already stored), rejected (with
the indexer's reason), or no answer within --timeout. Exits 1 if any prompt
was rejected or unanswered.

A file holds one prompt (a mapping) or a list of them; YAML files may hold
several documents. A prompt has the fields of prompt.created: id, type,
name, content (a Go text/template using {{.Param}}), and optionally version
(omitted: the next free version), description, parameters ({name, type,
required, default, description}), tags, author, metadata. Every prompt is
checked against the prompt.created schema before anything is published.

Event ids derive from tenant, content and the stream's duplicate window, so
seeding the same file twice within the window publishes nothing new (each
prompt is reported unchanged, with what the earlier seed got), and seeding
it again later is answered "unchanged" by the indexer.`)
	describe("prompt get", "ID [--version N | --label L] [--param K=V ...] [--params-json JSON] [--json]", `Asks the indexer for one prompt version (prompts.get.<tenant>) and prints
its metadata and content; with parameters, also the content rendered with
them. Without --version or --label the version labelled production is
returned, else the latest.

--param Name=value gives a string; --param Name:=JSON gives any JSON value
(--param Count:=3, --param Strict:=true). --params-json gives them all as
one JSON object; --param values override it.`)
	describe("prompt search", "QUERY [--type T] [--tag X ...] [--limit N] [--json]", `Searches the prompt library (search.prompts.<tenant>): the tenant's prompts
and the _global ones, by meaning and by words, re-ranked by quality,
recency and usage. Prints a table, best first, with each result's score and
the components it is made of, and how the candidates were retrieved: when
search fell back to words alone (the embedding provider is down) it says
it is degraded, and why.`)
	describe("prompt activate", "ID VERSION [--label production] [--reason TEXT] [--by WHO] [--json]", `Moves a label (default production) to a prompt version by publishing
prompt.activated, waits for the indexer's answer and prints it: the labels
now on the version, or why it was rejected (unknown_version). Agents that
get the prompt by label receive that version from then on. Exits 1 when
rejected or unanswered.`)
}

// subcommand is one verb of a command group such as agentq prompt.
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, e Env, cfg config.Config, args []string) error
}

var promptSubcommands = []subcommand{
	{"seed", "publish prompts from YAML or JSON files and report what the indexer made of each", runPromptSeed},
	{"get", "print one prompt version, rendered with parameters when given", runPromptGet},
	{"search", "search prompts by meaning and words; a ranked table with score components", runPromptSearch},
	{"activate", "move a label (default production) to a version and wait for the indexer's answer", runPromptActivate},
}

func runPrompt(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	return runGroup(ctx, e, cfg, "prompt", promptSubcommands, args)
}

// runGroup runs the subcommand named by args[0]. Errors are prefixed with
// the subcommand's name, since Run prefixes them with the group's.
func runGroup(ctx context.Context, e Env, cfg config.Config, group string, subs []subcommand, args []string) error {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	if len(args) == 0 {
		fmt.Fprintf(e.Stderr, "agentq %s: a subcommand is required (%s)\n", group, strings.Join(names, ", "))
		groupUsage(e.Stderr, group, subs)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		groupUsage(e.Stderr, group, subs)
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			if err := s.run(ctx, e, cfg, args[1:]); err != nil {
				if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
					return err
				}
				return fmt.Errorf("%s: %w", s.name, err)
			}
			return nil
		}
	}
	fmt.Fprintf(e.Stderr, "agentq %s: unknown subcommand %q (%s)\n", group, args[0], strings.Join(names, ", "))
	groupUsage(e.Stderr, group, subs)
	return errUsage
}

func groupUsage(w io.Writer, group string, subs []subcommand) {
	h := helps[group]
	fmt.Fprintf(w, "usage: agentq %s %s\n\n%s\n\nsubcommands:\n", group, h.synopsis, h.text)
	for _, s := range subs {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, "\nRun `agentq %s <subcommand> -h` for its arguments and flags.\n", group)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`agentq prompt get ID --version 2`), which the flag
// package alone stops at, and returns the positional arguments. After
// "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, parseError(err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// tenantFlag adds --tenant, defaulting to AGENTQ_TENANT, else "default".
func tenantFlag(fs *flag.FlagSet, e Env) *string {
	def := e.Getenv("AGENTQ_TENANT")
	if def == "" {
		def = "default"
	}
	return fs.String("tenant", def, "tenant id ([a-z0-9_-]{1,64}); AGENTQ_TENANT sets the default")
}

// checkTenant returns a usage error when tenant is malformed.
func checkTenant(e Env, fs *flag.FlagSet, name, tenant string) error {
	if !bus.ValidTenant(tenant) {
		return usageError(e, fs, name, "tenant %q does not match [a-z0-9_-]{1,64}", tenant)
	}
	return nil
}

// --- agentq prompt seed ---

var promptCatalog = catalog{
	noun: "prompt", eventType: indexer.TypePromptCreated, okType: indexer.TypePromptIndexed,
	label: func(en entry) string {
		id := en.str("id")
		if id == "" {
			return ""
		}
		if v, ok := asInt(en.data["version"]); ok {
			return fmt.Sprintf("(%s@%d)", id, v)
		}
		return "(" + id + ")"
	},
}

func runPromptSeed(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt seed"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answers after publishing")
	asJSON := fs.Bool("json", false, "print JSON: counts and every prompt's outcome")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError(e, fs, name, "FILE or DIR is required (- reads stdin)")
	case len(pos) > 1:
		return usageError(e, fs, name, "one FILE or DIR, got %d arguments", len(pos))
	case *timeout <= 0:
		return usageError(e, fs, name, "--timeout must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	ens, err := loadEntries(e, pos[0])
	if err != nil {
		return err
	}
	return publishCatalog(ctx, e, cfg, promptCatalog, *tenant, ens, *timeout, *asJSON)
}

// --- agentq prompt activate ---

func runPromptActivate(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt activate"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	label := fs.String("label", "production", "label to move to the version")
	reason := fs.String("reason", "", "why the version is activated (kept in the event)")
	by := fs.String("by", e.Getenv("USER"), "who activates it (kept in the event as activated_by)")
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answer")
	asJSON := fs.Bool("json", false, "print the outcome as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError(e, fs, name, "ID and VERSION are required, got %d arguments", len(pos))
	}
	version, err := strconv.Atoi(pos[1])
	if err != nil || version < 1 {
		return usageError(e, fs, name, "VERSION must be a whole number of at least 1, got %q", pos[1])
	}
	if *timeout <= 0 {
		return usageError(e, fs, name, "--timeout must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	data := map[string]any{"prompt_id": pos[0], "version": version, "label": *label}
	if *reason != "" {
		data["reason"] = *reason
	}
	if *by != "" {
		data["activated_by"] = *by
	}
	r, err := newRequest(indexer.TypePromptActivated, *tenant, cliSource, data)
	if err != nil {
		return err
	}
	if err := r.check(); err != nil {
		return usageError(e, fs, name, "%v", err)
	}
	return activate(ctx, e, cfg, r, activation{PromptID: pos[0], Version: version, Label: *label}, *timeout, *asJSON)
}

// activationOutcome is what the indexer answered to a prompt.activated.
type activationOutcome struct {
	Outcome    string   `json:"outcome"` // activated, rejected or no_answer
	Labels     []string `json:"labels,omitempty"`
	ReasonCode string   `json:"reason_code,omitempty"`
	Reason     string   `json:"reason,omitempty"`
}

// readActivation reads the indexer's answer a (nil: none within timeout)
// to prompt.activated evID; the error says why the label did not move.
func readActivation(a *answer.Answer, timeout time.Duration, evID string) (activationOutcome, error) {
	switch {
	case a == nil:
		return activationOutcome{Outcome: outcomeNoAnswer}, fmt.Errorf("no answer from the indexer within %s to prompt.activated %s: is the indexer running (`make dev` runs it)? `agentq dlq --consumer indexer` lists what it could not process", timeout, evID)
	case a.Type == indexer.TypeRejected:
		var r rejected
		_ = json.Unmarshal(a.Data, &r)
		return activationOutcome{Outcome: outcomeRejected, ReasonCode: r.ReasonCode, Reason: r.Reason},
			fmt.Errorf("rejected: %s: %s", r.ReasonCode, oneLineText(r.Reason))
	default:
		var d indexed
		_ = json.Unmarshal(a.Data, &d)
		return activationOutcome{Outcome: "activated", Labels: d.Labels}, nil
	}
}
