package cli_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/testenv"
)

// agentq reindex after the tools' model changes (lexical to the sentence
// encoder): it re-embeds exactly the tenant's tools, with a line of
// progress per tenth on a pipe, reports as text or JSON, and a second run
// finds nothing to do.
func TestReindexCommand(t *testing.T) {
	if !embed.SentenceAvailable("") {
		t.Skip("the sentence encoder is not installed (npm ci)")
	}
	_, client := withIndexer(t) // tools embedded with the lexical embedder (testenv.Config)
	ctx := context.Background()
	tenant := testenv.Tenant(t)
	seedExamples(t, client, tenant)

	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_LOG_LEVEL": "warn",
		"AGENTQ_EMBED_PROMPTS": "lexical", "AGENTQ_EMBED_TOOLS": "sentence"}
	type report struct {
		Prompts        int    `json:"prompts"`
		Tools          int    `json:"tools"`
		PromptModel    string `json:"prompt_model"`
		ToolModel      string `json:"tool_model"`
		SkippedPrompts int    `json:"skipped_prompts"`
		SkippedTools   int    `json:"skipped_tools"`
		TookMS         int64  `json:"took_ms"`
	}
	code, out, errOut := run(ctx, env, "", "reindex", "--tenant", tenant, "--batch", "4", "--json")
	require.Equal(t, 0, code, errOut)
	var got report
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, report{Tools: 10, PromptModel: embed.LexicalModel, ToolModel: embed.SentenceModel, TookMS: got.TookMS}, got)
	// Progress: prompts had nothing to do; tools by batches of 4, a line
	// each time another tenth is reached.
	require.Contains(t, errOut, "prompts: nothing to re-embed\n"+
		"tools: 0/10 (0%)\ntools: 4/10 (40%)\ntools: 8/10 (80%)\ntools: 10/10 (100%)\n")

	code, out, errOut = run(ctx, env, "", "reindex", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^re-embedded 0 prompts with agentq-lexical-v1 and 0 tools with agentq-use-lite-v2 in \S+\n$`, out)
	require.Contains(t, errOut, "prompts: nothing to re-embed\ntools: nothing to re-embed\n")

	code, _, errOut = run(ctx, env, "", "reindex", "extra")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `agentq reindex: unexpected argument "extra"`)
}
