package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/testenv"
)

var (
	examplePrompts = filepath.Join("..", "..", "examples", "prompts.yaml")
	exampleTools   = filepath.Join("..", "..", "examples", "tools.yaml")
)

// seedReport is what prompt seed and tool register print with --json.
type seedReport struct {
	Tenant     string `json:"tenant"`
	Created    int    `json:"created"`
	Unchanged  int    `json:"unchanged"`
	Rejected   int    `json:"rejected"`
	NoAnswer   int    `json:"no_answer"`
	Duplicates int    `json:"duplicate_publishes"`
	Items      []struct {
		Source         string   `json:"source"`
		Index          int      `json:"index"`
		Line           int      `json:"line"`
		PromptID       string   `json:"prompt_id"`
		ToolName       string   `json:"tool_name"`
		Version        int      `json:"version"`
		EventID        string   `json:"event_id"`
		Duplicate      bool     `json:"duplicate_publish"`
		Outcome        string   `json:"outcome"`
		EarlierOutcome string   `json:"earlier_outcome"`
		ContentHash    string   `json:"content_hash"`
		Labels         []string `json:"labels"`
		ReasonCode     string   `json:"reason_code"`
		Reason         string   `json:"reason"`
	} `json:"items"`
}

func decodeReport(t *testing.T, out string) seedReport {
	t.Helper()
	var r seedReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// withIndexer starts NATS and an indexer process on the test database and
// returns a client environment for the commands. configure, if not nil,
// adjusts the indexer's configuration.
func withIndexer(t *testing.T, configure ...func(*config.Config)) (*testenv.NATS, map[string]string) {
	t.Helper()
	n := testenv.StartNATS(t)
	cfg := testenv.Config(t, n.URL)
	for _, c := range configure {
		c(&cfg)
	}
	testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
	return n, map[string]string{"AGENTQ_NATS_URL": n.URL}
}

// countSubject returns how many messages stream AGENTQ holds on subject.
func countSubject(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	return info.State.Subjects[subject]
}

// The scenario: seed the example prompts, seed them again (the
// same window: deduplicated, the earlier answers reported; a later window:
// answered unchanged), a conflicting version rejected, a new version by
// omitting it, activation moves labels, an unknown version is rejected.
func TestPromptSeedActivateEndToEnd(t *testing.T) {
	n, client := withIndexer(t)
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	subject := "prompt.created." + tenant

	code, out, errOut := run(ctx, client, "", "prompt", "seed", examplePrompts, "--tenant", tenant, "--timeout", "60s", "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "publishing 6 prompts ...")
	rep := decodeReport(t, out)
	require.Equal(t, tenant, rep.Tenant)
	require.Equal(t, 6, rep.Created, out)
	require.Zero(t, rep.Unchanged+rep.Rejected+rep.NoAnswer, out)
	ids := []string{"support-answer", "ticket-summary", "sql-repair", "request-router", "web-search-tool", "step-by-step-math"}
	types := []string{"system", "task", "repair", "routing", "tool_description", "chain_of_thought"}
	contents := exampleContents(t)
	firstEventIDs := map[string]bool{}
	for i, it := range rep.Items {
		require.Equal(t, examplePrompts, it.Source)
		require.Equal(t, i+1, it.Index)
		require.Positive(t, it.Line)
		require.Equal(t, ids[i], it.PromptID)
		require.Equal(t, 1, it.Version)
		require.Equal(t, "created", it.Outcome)
		require.False(t, it.Duplicate)
		require.Equal(t, library.Hash(ids[i], 1, contents[i], types[i]), it.ContentHash, "the hash of what the file holds")
		firstEventIDs[it.EventID] = true
	}
	require.Len(t, firstEventIDs, 6)
	require.Equal(t, uint64(6), countSubject(t, n.JS, subject))

	// Again at once: the same event ids, dropped by JetStream; nothing is
	// created by this run, and the report says so (the earlier answers,
	// read back from the stream, said "created" for the earlier run).
	code, out, errOut = run(ctx, client, "", "prompt", "seed", examplePrompts, "--tenant", tenant, "--timeout", "60s")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "6 prompts for tenant "+tenant+": 0 created, 6 unchanged (6 already published within the duplicate window: nothing stored again), 0 rejected, 0 without an answer")
	require.Regexp(t, `(?m)^unchanged\s+support-answer@1\s+\S+prompts\.yaml#1\s+hash [0-9a-f]{12} \(already published within the duplicate window: created then\)$`, out)
	require.Equal(t, uint64(6), countSubject(t, n.JS, subject), "nothing new was stored")
	code, out, errOut = run(ctx, client, "", "prompt", "seed", examplePrompts, "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	rep = decodeReport(t, out)
	require.Equal(t, []int{0, 6, 0, 0, 6}, []int{rep.Created, rep.Unchanged, rep.Rejected, rep.NoAnswer, rep.Duplicates}, out)
	for _, it := range rep.Items {
		require.True(t, it.Duplicate)
		require.Equal(t, "unchanged", it.Outcome)
		require.Equal(t, "created", it.EarlierOutcome, "what the earlier publish got")
		require.True(t, firstEventIDs[it.EventID])
	}

	// A conflicting version is rejected with the indexer's reason; a
	// version left out becomes the next one; the file's other entry is
	// unchanged.
	dir := t.TempDir()
	conflict := filepath.Join(dir, "conflict.yaml")
	require.NoError(t, os.WriteFile(conflict, []byte(`- id: support-answer
  version: 1
  type: system
  name: Customer support answer
  content: Answer rudely.
- id: support-answer
  type: system
  name: Customer support answer
  content: Answer briefly, in {{.Lang}}.
  parameters: [{name: Lang, type: string, default: English}]
- id: step-by-step-math
  version: 1
  type: chain_of_thought
  name: Solve a word problem step by step
  parameters: [{name: Problem, type: string, required: true, description: The word problem.}]
  content: |
`+indent(contents[5], "    ")), 0o644))
	code, out, errOut = run(ctx, client, "", "prompt", "seed", conflict, "--tenant", tenant, "--json")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "1 of 3 prompts rejected, 0 without an answer")
	rep = decodeReport(t, out)
	require.Equal(t, []int{1, 1, 1, 0}, []int{rep.Created, rep.Unchanged, rep.Rejected, rep.NoAnswer}, out)
	require.Equal(t, "rejected", rep.Items[0].Outcome)
	require.Equal(t, indexer.ReasonVersionConflict, rep.Items[0].ReasonCode)
	require.Contains(t, rep.Items[0].Reason, "already exists")
	require.Equal(t, "created", rep.Items[1].Outcome)
	require.Equal(t, 2, rep.Items[1].Version, "the next free version")
	require.Equal(t, "unchanged", rep.Items[2].Outcome)
	require.Equal(t, 1, rep.Items[2].Version)
	code, out, _ = run(ctx, client, "", "prompt", "seed", conflict, "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Regexp(t, `(?m)^rejected\s+support-answer@1\s+\S+conflict\.yaml#1\s+version_conflict: .*already exists`, out)

	// prompts.get answers from the indexer's cache; a label move is read
	// by the next get all the same.
	getVersion := func() int {
		code, out, errOut := run(ctx, client, "", "prompt", "get", "support-answer", "--tenant", tenant, "--json")
		require.Equal(t, 0, code, errOut)
		var g struct {
			Prompt struct {
				Version int `json:"version"`
			} `json:"prompt"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &g), out)
		return g.Prompt.Version
	}
	require.Equal(t, 2, getVersion(), "no production label: the latest")
	require.Equal(t, 2, getVersion(), "again, from the cache")
	code, out, errOut = run(ctx, client, "", "prompt", "activate", "support-answer", "1", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, getVersion(), "production moved to 1")

	// Activation: labels move, the answer lists the version's labels.
	code, out, errOut = run(ctx, client, "", "prompt", "activate", "support-answer", "2", "--tenant", tenant, "--reason", "shorter answers")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "support-answer@2 is now production for tenant "+tenant+" (labels on this version: production)\n", out)
	code, out, errOut = run(ctx, client, "", "prompt", "activate", "--json", "--label", "staging", "support-answer", "2", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	var act struct {
		EventID  string   `json:"event_id"`
		PromptID string   `json:"prompt_id"`
		Version  int      `json:"version"`
		Label    string   `json:"label"`
		Outcome  string   `json:"outcome"`
		Labels   []string `json:"labels"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &act), out)
	require.Equal(t, "support-answer", act.PromptID)
	require.Equal(t, 2, act.Version)
	require.Equal(t, "staging", act.Label)
	require.Equal(t, "activated", act.Outcome)
	require.Equal(t, []string{"production", "staging"}, act.Labels)
	require.NotEmpty(t, act.EventID)

	code, out, errOut = run(ctx, client, "", "prompt", "activate", "support-answer", "9", "--tenant", tenant)
	require.Equal(t, 1, code, out)
	require.Empty(t, out)
	require.Regexp(t, `agentq prompt: activate: rejected: unknown_version: .*9`, errOut)

	// A later window: new event ids, answered unchanged. The window is
	// shortened to a second so the test need not wait two minutes.
	shortenDuplicateWindow(t, n.JS, time.Second)
	time.Sleep(2 * time.Second) // past the window of the last seed: the condition is time itself
	code, out, errOut = run(ctx, client, "", "prompt", "seed", examplePrompts, "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	rep = decodeReport(t, out)
	require.Equal(t, 6, rep.Unchanged, out)
	for i, it := range rep.Items {
		require.False(t, it.Duplicate)
		require.False(t, firstEventIDs[it.EventID], "a new id in a new window")
		require.Equal(t, 1, it.Version)
		require.Equal(t, library.Hash(ids[i], 1, contents[i], types[i]), it.ContentHash)
	}
	require.Equal(t, uint64(6+3+6), countSubject(t, n.JS, subject))
}

// exampleContents returns the content of every prompt in examples/prompts.yaml.
func exampleContents(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(examplePrompts)
	require.NoError(t, err)
	var docs []struct {
		Content string `yaml:"content"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &docs))
	out := make([]string, len(docs))
	for i, d := range docs {
		out[i] = d.Content
	}
	return out
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// shortenDuplicateWindow sets stream AGENTQ's duplicate window.
func shortenDuplicateWindow(t *testing.T, js jetstream.JetStream, w time.Duration) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Duplicates = w
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// Tools from a file and from flags: created, a changed definition is a new
// version, the same definition written differently is unchanged.
func TestToolRegisterEndToEnd(t *testing.T) {
	n, client := withIndexer(t)
	ctx := context.Background()
	tenant := testenv.Tenant(t)

	code, out, errOut := run(ctx, client, "", "tool", "register", exampleTools, "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	rep := decodeReport(t, out)
	require.Equal(t, 10, rep.Created, out)
	require.Zero(t, rep.Unchanged+rep.Rejected+rep.NoAnswer)
	for _, it := range rep.Items {
		require.NotEmpty(t, it.ToolName)
		require.Equal(t, 1, it.Version)
		require.Equal(t, "created", it.Outcome)
		require.Len(t, it.ContentHash, 64)
	}
	require.Equal(t, "web_search", rep.Items[0].ToolName)
	require.Equal(t, uint64(10), countSubject(t, n.JS, "tool.registered."+tenant))

	// One tool from flags, its schema from a file; then changed; then the
	// same definition with its tags in another order.
	schema := filepath.Join(t.TempDir(), "schema.json")
	require.NoError(t, os.WriteFile(schema, []byte(`{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}`), 0o644))
	register := func(description string, tags ...string) seedReport {
		args := []string{"tool", "register", "--tenant", tenant, "--json", "--name", "weather", "--server", "weather-mcp", "--schema-file", schema, "--description", description}
		for _, tag := range tags {
			args = append(args, "--tag", tag)
		}
		code, out, errOut := run(ctx, client, "", args...)
		require.Equal(t, 0, code, errOut)
		return decodeReport(t, out)
	}
	first := register("Current weather for a city.", "weather", "forecast")
	require.Equal(t, 1, first.Created)
	require.Equal(t, "flags", first.Items[0].Source)
	require.Equal(t, 1, first.Items[0].Version)
	changed := register("Current weather and a 3-day forecast for a city.", "weather", "forecast")
	require.Equal(t, 1, changed.Created)
	require.Equal(t, 2, changed.Items[0].Version, "a changed definition is a new version")
	same := register("Current weather and a 3-day forecast for a city.", "forecast", "weather")
	require.Equal(t, 1, same.Unchanged, "tags are a set: the same definition")
	require.Equal(t, 2, same.Items[0].Version)
	require.Equal(t, changed.Items[0].ContentHash, same.Items[0].ContentHash)
	h, err := registry.Hash("weather", "Current weather and a 3-day forecast for a city.",
		json.RawMessage(`{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}`), "weather-mcp", []string{"weather", "forecast"})
	require.NoError(t, err)
	require.Equal(t, h, same.Items[0].ContentHash)

	// From stdin, human output.
	code, out, errOut = run(ctx, client, `{"name":"ping","description":"Check that a host answers."}`, "tool", "register", "-", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^created\s+ping v1\s+stdin#1\s+hash [0-9a-f]{12}$`, out)
	require.Contains(t, out, "1 tools for tenant "+tenant+": 1 created, 0 unchanged, 0 rejected, 0 without an answer")

	// The same definition twice in one input is one event, and both
	// entries report its answer.
	before := countSubject(t, n.JS, "tool.registered."+tenant)
	code, out, errOut = run(ctx, client, "- {name: echo, description: Repeat the input.}\n- {description: Repeat the input., name: echo}\n", "tool", "register", "-", "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	twice := decodeReport(t, out)
	require.Equal(t, 2, twice.Created)
	require.Equal(t, twice.Items[0].EventID, twice.Items[1].EventID)
	require.Equal(t, []int{1, 2}, []int{twice.Items[0].Index, twice.Items[1].Index})
	require.Equal(t, before+1, countSubject(t, n.JS, "tool.registered."+tenant))
}

// Without an indexer the events are stored and the command says nobody
// answered, and how to find out why.
func TestSeedWithoutIndexer(t *testing.T) {
	n := testenv.StartNATS(t)
	client := map[string]string{"AGENTQ_NATS_URL": n.URL, "AGENTQ_TENANT": "lonely"}
	code, out, errOut := run(context.Background(), client, "", "prompt", "seed", examplePrompts, "--timeout", "300ms")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "note: stream AGENTQ has no indexer consumer yet")
	require.Contains(t, errOut, "agentq prompt: seed: 0 of 6 prompts rejected, 6 without an answer within 300ms")
	require.Contains(t, out, "6 prompts for tenant lonely: 0 created, 0 unchanged, 0 rejected, 6 without an answer")
	require.Contains(t, out, "is the indexer running")
	require.Regexp(t, `(?m)^no answer\s+support-answer@1\s+\S+#1\s+event [0-9a-f-]{36}$`, out)
	require.Equal(t, uint64(6), countSubject(t, n.JS, "prompt.created.lonely"), "AGENTQ_TENANT is the tenant")

	code, _, errOut = run(context.Background(), client, "", "prompt", "get", "support-answer")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "agentq prompt: get: nothing serves prompts.get.lonely: is the indexer running")
}

// An invalid file is refused before anything is published, naming every
// bad entry.
func TestSeedInvalidFilePublishesNothing(t *testing.T) {
	n := testenv.StartNATS(t)
	client := map[string]string{"AGENTQ_NATS_URL": n.URL}
	f := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(f, []byte("- id: ok\n  type: task\n  name: OK\n  content: fine\n- id: bad\n  type: poem\n  name: B\n  content: x\n"), 0o644))
	code, out, errOut := run(context.Background(), client, "", "prompt", "seed", f, "--tenant", "demo")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, fmt.Sprintf("agentq prompt: seed: 1 entry is invalid; nothing was published:\n  %s entry 2 (line 5) (bad): data does not match agentq.prompt.created.v1: /type: got \"poem\", want one of \"system\", \"user\", \"task\", \"repair\", \"routing\", \"tool_description\", \"chain_of_thought\", \"custom\"\n", f), errOut)
	require.Zero(t, countSubject(t, n.JS, "prompt.created.demo"))
}

// Usage errors say what is wrong on their first line; -h describes every
// command.
func TestCatalogUsage(t *testing.T) {
	tests := []struct {
		args  []string
		code  int
		first string
		more  []string
	}{
		{[]string{"prompt"}, 2, "agentq prompt: a subcommand is required (seed, get, search, activate)", []string{"subcommands:", "seed", "activate"}},
		{[]string{"prompt", "nope"}, 2, `agentq prompt: unknown subcommand "nope" (seed, get, search, activate)`, nil},
		{[]string{"prompt", "-h"}, 0, "usage: agentq prompt seed|get|search|activate [args] [flags]", []string{"AGENTQ_TENANT", "search     search prompts"}},
		{[]string{"tool"}, 2, "agentq tool: a subcommand is required (register, search, health, release)", nil},
		{[]string{"tool", "help"}, 0, "usage: agentq tool register|search|health|release [args] [flags]", []string{"register", "search", "health", "release"}},
		{[]string{"tool", "release"}, 2, "agentq tool release: NAME is required, got 0 arguments", nil},
		{[]string{"tool", "release", "x", "--tenant", "Bad!"}, 2, `agentq tool release: tenant "Bad!" does not match [a-z0-9_-]{1,64}`, nil},
		{[]string{"tool", "health", "extra"}, 2, "agentq tool health: unexpected arguments [extra]", nil},
		{[]string{"prompt", "seed"}, 2, "agentq prompt seed: FILE or DIR is required (- reads stdin)", []string{"usage: agentq prompt seed FILE|DIR", "-timeout"}},
		{[]string{"prompt", "seed", "a", "b"}, 2, "agentq prompt seed: one FILE or DIR, got 2 arguments", nil},
		{[]string{"prompt", "seed", "a", "--tenant", "Bad!"}, 2, `agentq prompt seed: tenant "Bad!" does not match [a-z0-9_-]{1,64}`, nil},
		{[]string{"prompt", "seed", "a", "--timeout", "0s"}, 2, "agentq prompt seed: --timeout must be positive", nil},
		{[]string{"prompt", "seed", "-h"}, 0, "usage: agentq prompt seed FILE|DIR [--tenant T] [--timeout D] [--json]", []string{"duplicate window", "unchanged", "-tenant", "-json"}},
		{[]string{"prompt", "get"}, 2, "agentq prompt get: the prompt ID is required", []string{"-param"}},
		{[]string{"prompt", "get", "x", "--version", "2", "--label", "staging"}, 2, "agentq prompt get: --version and --label exclude each other", nil},
		{[]string{"prompt", "get", "x", "--param", "novalue"}, 2, `agentq prompt get: --param "novalue": want Name=value or Name:=JSON`, nil},
		{[]string{"prompt", "get", "-h"}, 0, "usage: agentq prompt get ID [--version N | --label L] [--param K=V ...] [--params-json JSON] [--json]", []string{"Name:=JSON", "production"}},
		{[]string{"prompt", "search"}, 2, "agentq prompt search: a QUERY is required", nil},
		{[]string{"prompt", "search", "q", "--limit", "51"}, 2, "agentq prompt search: --limit must be 1 to 50", nil},
		{[]string{"prompt", "search", "-h"}, 0, "usage: agentq prompt search QUERY [--type T] [--tag X ...] [--limit N] [--json]", []string{"degraded", "-tag"}},
		{[]string{"prompt", "activate", "x"}, 2, "agentq prompt activate: ID and VERSION are required, got 1 arguments", nil},
		{[]string{"prompt", "activate", "x", "two"}, 2, `agentq prompt activate: VERSION must be a whole number of at least 1, got "two"`, nil},
		{[]string{"prompt", "activate", "x", "2", "--label", "Prod"}, 2, `agentq prompt activate: data does not match agentq.prompt.activated.v1: /label: "Prod" does not match pattern ^[a-z0-9_.-]{1,64}$`, nil},
		{[]string{"prompt", "activate", "-h"}, 0, "usage: agentq prompt activate ID VERSION [--label production] [--reason TEXT] [--by WHO] [--json]", []string{"unknown_version", "-reason"}},
		{[]string{"tool", "register"}, 2, "agentq tool register: FILE, DIR or - is required, or --name and --description for one tool", nil},
		{[]string{"tool", "register", "f.yaml", "--name", "x"}, 2, "agentq tool register: give FILE or the flags of one tool (--name ...), not both", nil},
		{[]string{"tool", "register", "--name", "x"}, 2, "agentq tool register: one tool needs --name and --description", nil},
		{[]string{"tool", "register", "-h"}, 0, "usage: agentq tool register FILE|DIR|- [--tenant T] [--timeout D] [--json]", []string{"--schema-file FILE", "input_schema", "-tag"}},
		{[]string{"tool", "search"}, 2, "agentq tool search: a QUERY is required", nil},
		{[]string{"tool", "search", "q", "--min-quality", "1.5"}, 2, "agentq tool search: --min-quality must be 0 to 1", nil},
		{[]string{"tool", "search", "-h"}, 0, "usage: agentq tool search QUERY [--limit N] [--exclude NAME ...] [--min-quality Q] [--json]", []string{"quarantined", "degraded", "-exclude"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(context.Background(), nil, "", tc.args...)
			require.Equal(t, tc.code, code, errOut)
			require.Empty(t, out)
			first, rest, _ := strings.Cut(errOut, "\n")
			require.Equal(t, tc.first, first)
			for _, want := range tc.more {
				require.Contains(t, rest, want)
			}
		})
	}
	code, _, errOut := run(context.Background(), nil, "", "help")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "prompt       the prompt library")
	require.Contains(t, errOut, "tool         the tool registry")
}
