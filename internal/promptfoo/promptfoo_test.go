package promptfoo_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/promptfoo"
)

func ptr(f float64) *float64 { return &f }

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// A realistic configuration: inline, file and chat prompts, defaultTest
// vars and assertions, tests with thresholds, weights, an array var that
// expands and a file var.
func TestLoadSupportConfig(t *testing.T) {
	s, err := promptfoo.Load(filepath.Join("testdata", "support", "promptfooconfig.yaml"), promptfoo.Options{})
	require.NoError(t, err)
	require.Equal(t, "Support answers for the billing product", s.Description)
	require.Equal(t, 3, s.Repetitions)
	require.Equal(t, "question", s.QueryVar)
	require.Equal(t, []string{
		"providers are not used: the lab runs every version with its own model (AGENTQ_LLM_MODEL, or --model)",
		"evaluateOptions.maxConcurrency is not used (AGENTQ_LAB_CONCURRENCY sets how many calls run at once)",
	}, s.Notes)

	params := []library.Param{{Name: "product", Default: ""}, {Name: "question", Default: ""}}
	require.Equal(t, []promptfoo.Prompt{
		{Label: "prompt 1", Content: "You are a support agent for {{.product}}.\nAnswer the customer's question: {{.question}}", Params: params},
		{Label: "concise.txt", Content: "You answer {{.product}} customers in two sentences at most.\nQuestion: {{.question}}", Params: params},
		{Label: "chat with a system message", Content: `You are the {{.product}} assistant. Answer in JSON: {"type": "answer", "message": "..."}.`, Params: params},
	}, s.Prompts)

	require.Equal(t, []lab.Assertion{
		{Type: "not-icontains", Value: raw("as an AI")},
		{Type: "latency", Threshold: ptr(8000), Weight: ptr(0)},
	}, s.Assert)
	require.Nil(t, s.Threshold)

	levenshtein := []lab.Assertion{{Type: "levenshtein", Value: raw("Go to Settings"), Threshold: ptr(200)}}
	require.Equal(t, []lab.Query{
		{Query: "How do I reset my password?", Vars: map[string]any{"product": "Acme Billing", "question": "How do I reset my password?"},
			Assert: []lab.Assertion{{Type: "icontains", Value: raw("password")}, {Type: "contains-any", Value: raw([]string{"Settings", "Security"}), Weight: ptr(2)}}},
		{Query: "Can I get a refund for last month?", Vars: map[string]any{"product": "Acme Pay", "question": "Can I get a refund for last month?"},
			Assert: []lab.Assertion{{Type: "regex", Value: raw("(?i)refund")}, {Type: "not-contains", Value: raw("I don't know")}}, Threshold: ptr(0.5)},
		{Query: "Where do I download my invoice?", Vars: map[string]any{"product": "Acme Billing", "question": "Where do I download my invoice?"}, Assert: levenshtein},
		{Query: "How do I change my billing address?", Vars: map[string]any{"product": "Acme Billing", "question": "How do I change my billing address?"}, Assert: levenshtein},
		{Query: "How do I export my invoices as CSV?", Vars: map[string]any{"product": "Acme Billing", "question": "How do I export my invoices as CSV?"},
			Assert: []lab.Assertion{{Type: "is-json", Value: raw(map[string]any{"type": "object", "required": []string{"type", "message"}})}}},
	}, s.Queries)

	// Every version renders with every query's vars, as the lab checks.
	for _, p := range s.Prompts {
		for _, q := range s.Queries {
			_, err := library.Render(t.Context(), p.Content, p.Params, q.Vars, library.Limits{})
			require.NoError(t, err, "%s with %v", p.Label, q.Vars)
		}
	}
}

// Everything the lab cannot run is listed, each where it is, and nothing
// is read.
func TestLoadUnsupported(t *testing.T) {
	_, err := promptfoo.Load(filepath.Join("testdata", "unsupported", "promptfooconfig.yaml"), promptfoo.Options{})
	var u *promptfoo.UnsupportedError
	require.True(t, errors.As(err, &u), "%v", err)
	require.Equal(t, "promptfooconfig.yaml", u.File)
	require.Equal(t, []string{
		"scenarios (run each scenario as its own configuration)",
		"tests[0].assert[0]: type llm-rubric (model-graded (the lab's LLM judge scores every answer on its rubric: evaluation.rubric))",
		"tests[0].assert[1]: type javascript (runs JavaScript)",
		"tests[0].assert[2]: field transform",
		"tests[0].options (prefix, suffix, transform, a grading provider)",
		"tests[1].provider: a test of its own provider (the lab runs one model)",
		"tests[1].threshold 3: the lab takes a threshold from 0 to 1 (the weighted share of assertions that pass)",
		"prompts[1] (prompt.py): .py files (prompts from code or other formats)",
		`prompts[0]: Nunjucks beyond {{variable}} (filters, tags, comments, expressions) near "Summarize: {{article | truncate(100)}}"`,
		"no query var: the lab sends each test's query as the user message; name the var holding it with --query-var (tried query, question, input, message, prompt)",
	}, u.Problems)
	require.Contains(t, err.Error(), "nothing was published")
	require.Contains(t, err.Error(), "assertion types the lab runs: equals, contains")
}

// The query var: named, found among the usual names, or taken from a chat
// prompt's user message; without one the configuration is refused.
func TestQueryVar(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	cfg := write("a.yaml", "prompts: ['Reply to {{ask}} in {{lang}}']\ntests:\n  - vars: {ask: Hello there, lang: French}\n")
	_, err := promptfoo.Load(cfg, promptfoo.Options{})
	var u *promptfoo.UnsupportedError
	require.ErrorAs(t, err, &u)
	require.Len(t, u.Problems, 1)
	require.Contains(t, u.Problems[0], "no query var")
	require.Contains(t, u.Problems[0], "--query-var")

	s, err := promptfoo.Load(cfg, promptfoo.Options{QueryVar: "ask"})
	require.NoError(t, err)
	require.Equal(t, "Hello there", s.Queries[0].Query)
	require.Equal(t, "Reply to {{.ask}} in {{.lang}}", s.Prompts[0].Content)

	write("chat.yaml", "- role: system\n  content: Reply in {{lang}}.\n- role: user\n  content: '{{ ask }}'\n")
	s, err = promptfoo.Load(write("b.yaml", "prompts: [file://chat.yaml]\ntests:\n  - vars: {ask: Hi, lang: German}\n"), promptfoo.Options{})
	require.NoError(t, err)
	require.Equal(t, "ask", s.QueryVar)
	require.Equal(t, "Reply in {{.lang}}.", s.Prompts[0].Content)
	require.Equal(t, "chat.yaml", s.Prompts[0].Label)

	write("three.json", `[{"role":"system","content":"x"},{"role":"assistant","content":"y"},{"role":"user","content":"{{ask}}"}]`)
	_, err = promptfoo.Load(write("c.yaml", "prompts: [file://three.json]\ntests:\n  - vars: {ask: Hi}\n"), promptfoo.Options{})
	require.ErrorAs(t, err, &u)
	require.Contains(t, u.Problems[0], "a chat prompt of system, assistant, user messages")

	// Several prompts in one text file, split on ---; tests from a file.
	write("two.txt", "First: {{question}}\n---\nSecond: {{question}}\n")
	write("tests.yaml", "- vars: {question: one}\n- vars: {question: two}\n")
	s, err = promptfoo.Load(write("d.yaml", "prompts: file://two.txt\ntests: file://tests.yaml\n"), promptfoo.Options{})
	require.NoError(t, err)
	require.Len(t, s.Prompts, 2)
	require.Equal(t, "two.txt #2", s.Prompts[1].Label)
	require.Equal(t, "Second: {{.question}}", s.Prompts[1].Content)
	require.Len(t, s.Queries, 2)
}
