package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/testenv"
)

// seedExamples seeds the example prompts and tools for tenant through the
// indexer client reaches, and requires both to succeed.
func seedExamples(t *testing.T, client map[string]string, tenant string) {
	t.Helper()
	for _, args := range [][]string{{"prompt", "seed", examplePrompts}, {"tool", "register", exampleTools}} {
		code, out, errOut := run(context.Background(), client, "", append(args, "--tenant", tenant)...)
		require.Equal(t, 0, code, out+errOut)
	}
}

// get and search against the indexer's service: metadata, content and the
// rendering with string, typed and JSON parameters; errors as the service
// replies them; a ranked search table with filters, and JSON.
func TestPromptGetSearchEndToEnd(t *testing.T) {
	_, client := withIndexer(t)
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	seedExamples(t, client, tenant)
	contents := exampleContents(t)

	get := func(args ...string) (int, string, string) {
		return run(ctx, client, "", append([]string{"prompt", "get", "--tenant", tenant}, args...)...)
	}
	code, out, errOut := get("sql-repair", "--param", "Query=select * from orders where", "--param", "Error=syntax error at end of input")
	require.Equal(t, 0, code, errOut)
	head, body, ok := strings.Cut(out, "\n--- content ---\n")
	require.True(t, ok, out)
	require.True(t, strings.HasPrefix(head, "sql-repair@1  Repair a failing SQL query\n"), head)
	for _, re := range []string{
		`(?m)^  type\s+repair$`, `(?m)^  tenant\s+` + tenant + `$`, `(?m)^  hash\s+[0-9a-f]{64}$`,
		`(?m)^  tags\s+sql, repair, database$`, `(?m)^  author\s+data-platform$`, `(?m)^  description\s+Fix a SQL query`,
		`(?m)^    Dialect\s+string, default "PostgreSQL"\s+SQL dialect of the database\.$`,
		`(?m)^    Query\s+string, required\s+The query that failed\.$`,
	} {
		require.Regexp(t, re, head)
	}
	content, rendered, ok := strings.Cut(body, "\n--- rendered ---\n")
	require.True(t, ok, body)
	require.Equal(t, strings.TrimRight(contents[2], "\n")+"\n", content)
	require.Equal(t, "The following PostgreSQL query failed.\n\nQuery:\nselect * from orders where\n\nError:\nsyntax error at end of input\n\nReturn the corrected query",
		rendered[:strings.Index(rendered, " in a single")])

	// Typed values: Name:=JSON and --params-json; --json prints the reply.
	code, out, errOut = get("request-router", "--json", "--params-json", `{"Routes":["billing","sales"],"Request":"refund"}`, "--param", `Request="I want my money back"`)
	require.Equal(t, 0, code, errOut)
	var reply struct {
		Prompt struct {
			ID      string `json:"id"`
			Version int    `json:"version"`
			Tenant  string `json:"tenant"`
		} `json:"prompt"`
		Rendered string `json:"rendered"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reply), out)
	require.Equal(t, "request-router", reply.Prompt.ID)
	require.Equal(t, 1, reply.Prompt.Version)
	require.Equal(t, tenant, reply.Prompt.Tenant)
	require.Contains(t, reply.Rendered, "Routes:\n- billing\n- sales\n")
	require.Contains(t, reply.Rendered, `Request: "I want my money back"`, "a --param value is a string, quotes and all")
	code, out, errOut = get("ticket-summary", "--param", "MaxWords:=50", "--param", "Ticket=printer on fire")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "in at most 50 words")

	// No parameters: no rendered section when nothing is required.
	code, out, errOut = get("web-search-tool")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "--- content ---\nweb_search(query: string) searches the public web and returns up to {{.MaxResults}} results,")
	require.NotContains(t, out, "--- rendered ---")

	// Errors are the service's, with a hint where one helps.
	// Without parameters: the prompt and its content, not rendered.
	code, out, errOut = get("sql-repair")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "--- content ---\n"+strings.TrimRight(contents[2], "\n"))
	require.NotContains(t, out, "--- rendered ---")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `agentq prompt: get: not_found: prompt "nope" not found for tenant ` + tenant + " or _global\n"},
		{[]string{"sql-repair", "--version", "3"}, `agentq prompt: get: not_found: prompt "sql-repair" version 3 not found`},
		{[]string{"sql-repair", "--label", "staging"}, `agentq prompt: get: not_found: prompt "sql-repair" label "staging" not found`},
		{[]string{"ticket-summary", "--param", "MaxWords=50", "--param", "Ticket=x"}, `agentq prompt: get: rendering: ticket-summary@1: invalid parameters: parameter "MaxWords" must be an integer, got a string` + "\n"},
	} {
		code, out, errOut := get(tc.args...)
		require.Equal(t, 1, code, tc.args)
		require.Empty(t, out)
		if strings.HasSuffix(tc.want, "\n") {
			require.Equal(t, tc.want, errOut)
		} else {
			require.Contains(t, errOut, tc.want)
		}
	}

	// A label moved by activate is what get --label returns.
	code, _, errOut = run(ctx, client, "", "prompt", "activate", "sql-repair", "1", "--label", "staging", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	code, out, errOut = get("sql-repair", "--label", "staging", "--param", "Query=q", "--param", "Error=e")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^  labels\s+staging$`, out)

	// Search: the best match first, filters, limit, JSON.
	search := func(args ...string) []string {
		t.Helper()
		code, out, errOut := run(ctx, client, "", append([]string{"prompt", "search", "--tenant", tenant}, args...)...)
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		require.Equal(t, "retrieval: hybrid", lines[0])
		if len(lines) > 1 && lines[1] == "no prompts match" {
			return nil
		}
		require.Regexp(t, `^RANK\s+PROMPT\s+TYPE\s+NAME\s+SCORE\s+SIMILARITY\s+QUALITY\s+RECENCY\s+USAGE$`, lines[1])
		var ids []string
		for i, l := range lines[2:] {
			f := strings.Fields(l)
			require.Equal(t, fmt.Sprint(i+1), f[0], l)
			require.Regexp(t, `^\d\.\d{3}$`, f[len(f)-5], "score")
			ids = append(ids, f[1])
		}
		return ids
	}
	got := search("fix", "a", "failing", "SQL", "query")
	require.Equal(t, "sql-repair@1", got[0])
	require.Len(t, got, 5, "the service's default limit")
	require.Equal(t, []string{"request-router@1"}, search("which team should handle this", "--type", "routing"))
	got = search("summarise a support ticket", "--tag", "support", "--tag", "customer")
	require.Equal(t, []string{"support-answer@1"}, got, "every tag must match")
	require.Len(t, search("support", "--limit", "2"), 2)
	require.Nil(t, search("anything", "--tag", "no-such-tag"))

	code, out, errOut = run(ctx, client, "", "prompt", "search", "summarise a ticket", "--tenant", tenant, "--json", "--limit", "1")
	require.Equal(t, 0, code, errOut)
	var sr struct {
		Results []struct {
			Prompt struct {
				ID string `json:"id"`
			} `json:"prompt"`
			Score      float64            `json:"score"`
			Components map[string]float64 `json:"components"`
		} `json:"results"`
		Retrieval struct {
			Mode     string `json:"mode"`
			Degraded bool   `json:"degraded"`
		} `json:"retrieval"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sr), out)
	require.Len(t, sr.Results, 1)
	require.Equal(t, "ticket-summary", sr.Results[0].Prompt.ID)
	require.Positive(t, sr.Results[0].Score)
	require.Len(t, sr.Results[0].Components, 4)
	require.Equal(t, "hybrid", sr.Retrieval.Mode)
	require.False(t, sr.Retrieval.Degraded)

	// Tools: the best match, exclusions, the quality floor.
	tools := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(ctx, client, "", append([]string{"tool", "search", "--tenant", tenant}, args...)...)
		require.Equal(t, 0, code, errOut)
		return out
	}
	out = tools("send an email to a customer")
	lines := strings.Split(out, "\n")
	require.Equal(t, "retrieval: hybrid", lines[0])
	require.Regexp(t, `^RANK\s+TOOL\s+SERVER\s+STATE\s+SCORE\s+SIMILARITY\s+QUALITY\s+RECENCY\s+USAGE\s+DESCRIPTION$`, lines[1])
	require.Regexp(t, `^1\s+send_email\s+mail\s+-\s+\d\.\d{3}\s+\d\.\d{3}\s+0\.250\s+\d\.\d{3}\s+0\.000\s+Send an email from the support address`, lines[2])
	out = tools("send an email to a customer", "--exclude", "send_email", "--exclude", "kb_search", "--limit", "3")
	require.NotContains(t, out, "send_email")
	require.NotContains(t, out, "kb_search")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2+3)
	require.Equal(t, "retrieval: hybrid\nno tools match\n", tools("send an email", "--min-quality", "0.9"), "no tool has quality figures yet")
}

// When the embedding provider is down, search falls back to words and the
// commands say so, with the reason.
func TestSearchDegradedEndToEnd(t *testing.T) {
	srv := providertest.New(t)
	_, client := withIndexer(t, func(c *config.Config) {
		c.Embed.BaseURL, c.Embed.Model, c.EmbedTools = srv.URL, "test-embed", "auto"
	})
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	code, out, errOut := run(ctx, client, "", "tool", "register", exampleTools, "--tenant", tenant)
	require.Equal(t, 0, code, out+errOut)

	code, out, errOut = run(ctx, client, "", "tool", "search", "convert euros to dollars", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.True(t, strings.HasPrefix(out, "retrieval: hybrid\n"), out)

	srv.SetFailing(503, "")
	// Another query: the service keeps the embeddings of recent queries.
	code, out, errOut = run(ctx, client, "", "tool", "search", "convert an amount of euros into dollars", "--tenant", tenant, "--limit", "1")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(out, "\n")
	require.Equal(t, "retrieval: lexical — DEGRADED: embedding provider unavailable (test-embed); results are from full-text search alone", lines[0])
	require.Regexp(t, `^1\s+currency_convert\s+finance\s`, lines[2], "words still find it")
}
