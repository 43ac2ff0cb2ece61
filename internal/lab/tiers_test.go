package lab

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/report"
)

func TestStructuralTier(t *testing.T) {
	custom, err := compileSchema(json.RawMessage(`{"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		s      structural
		resp   string
		pass   bool
		score  float64
		reason string
	}{
		{"auto: seed shape", structural{format: FormatAuto}, `{"type": "answer", "message": "hi"}`, true, 1, ""},
		{"auto: seed shape in a fence", structural{format: FormatAuto}, "```json\n{\"type\": \"briefing\", \"summary\": \"s\"}\n```", true, 1, ""},
		{"auto: plain text passes at 0.5", structural{format: FormatAuto}, "Just words.", true, 0.5, "plain text"},
		{"auto: a bare number is text", structural{format: FormatAuto}, "42", true, 0.5, "plain text"},
		{"auto: JSON missing fields fails at 0.3", structural{format: FormatAuto}, `{"type": "answer"}`, false, 0.3, "JSON not matching the schema"},
		{"auto: briefing without summary or message", structural{format: FormatAuto}, `{"type": "briefing"}`, false, 0.3, "JSON not matching"},
		{"auto: unknown type", structural{format: FormatAuto}, `{"type": "poem", "message": "x"}`, false, 0.3, "JSON not matching"},
		{"auto: custom schema", structural{format: FormatAuto, schema: custom}, `{"answer": "yes"}`, true, 1, ""},
		{"auto: custom schema not matched", structural{format: FormatAuto, schema: custom}, `{"answer": 3}`, false, 0.3, "JSON not matching"},
		{"text", structural{format: FormatText}, "anything", true, 1, ""},
		{"text: empty", structural{format: FormatText}, "  ", false, 0, "empty response"},
		{"json", structural{format: FormatJSON}, `[1, 2]`, true, 1, ""},
		{"json: text fails", structural{format: FormatJSON}, "no", false, 0, "not JSON"},
		{"json_schema", structural{format: FormatJSONSchema, schema: custom}, `{"answer": "a"}`, true, 1, ""},
		{"json_schema: wrong shape", structural{format: FormatJSONSchema, schema: custom}, `{"other": 1}`, false, 0.3, "JSON not matching"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.s.eval(tc.resp)
			require.Equal(t, report.TierStructural, r.Tier)
			require.Equal(t, tc.pass, r.Pass, r.Reason)
			require.Equal(t, tc.score, r.Score)
			require.Contains(t, r.Reason, tc.reason)
		})
	}
}

func TestSeedRules(t *testing.T) {
	long := "This answer is long enough to count as a real answer to a search."
	for _, tc := range []struct {
		name, resp, intent string
		pass               bool
		reason             string
	}{
		{"short search answer", `{"type": "answer", "message": "Too short."}`, "search", false, "short_answer: a search answer of 10 characters (at least 50 wanted)"},
		{"long search answer", `{"type": "answer", "message": "` + long + `"}`, "search", true, ""},
		{"short answer of another intent", `{"type": "answer", "message": "Too short."}`, "account", true, ""},
		{"confirmed mutation", `{"type": "action", "success": true, "message": "The ticket was created."}`, "mutation", true, ""},
		{"unconfirmed mutation", `{"type": "action", "success": true, "message": "Working on it."}`, "mutation", false, "action_confirmation"},
		{"failed mutation needs no confirmation", `{"type": "action", "success": false, "message": "Working on it."}`, "mutation", true, ""},
		{"error with suggestions", `{"type": "error", "message": "No.", "suggestions": ["try again"]}`, "", true, ""},
		{"error explained", `{"type": "error", "message": "The service is down right now."}`, "", true, ""},
		{"bare error", `{"type": "error", "message": "Failed."}`, "", false, "error_quality"},
		{"question-only clarification", `{"type": "clarification", "message": "Which account do you mean?"}`, "", false, "clarification_only"},
		{"clarification with context", `{"type": "clarification", "message": "You have two accounts. Which one do you mean?"}`, "", true, ""},
		{"plain text has no seed rules", "Too short.", "search", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rulesTier(observed{response: tc.resp}, tc.intent, nil, nil)
			require.Equal(t, tc.pass, r.Pass, r.Reason)
			require.Contains(t, r.Reason, tc.reason)
		})
	}
}

func TestAssertions(t *testing.T) {
	resp := "Paris is the capital of France. {\"city\": \"Paris\", \"pop\": 2}"
	o := observed{response: resp, latencyMs: 120, promptTokens: 100, completion: 50, prices: &Prices{PromptPerMillion: 10, CompletionPerMillion: 20}}
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		a    Assertion
		pass bool
	}{
		{Assertion{Type: "contains", Value: json.RawMessage(`"capital"`)}, true},
		{Assertion{Type: "contains", Value: json.RawMessage(`"Capital"`)}, false},
		{Assertion{Type: "icontains", Value: json.RawMessage(`"CAPITAL"`)}, true},
		{Assertion{Type: "not-contains", Value: json.RawMessage(`"Berlin"`)}, true},
		{Assertion{Type: "not-icontains", Value: json.RawMessage(`"PARIS"`)}, false},
		{Assertion{Type: "contains-any", Value: json.RawMessage(`["Berlin", "Paris"]`)}, true},
		{Assertion{Type: "contains-any", Value: json.RawMessage(`"Berlin, Rome"`)}, false},
		{Assertion{Type: "icontains-any", Value: json.RawMessage(`["paris"]`)}, true},
		{Assertion{Type: "contains-all", Value: json.RawMessage(`["Paris", "France"]`)}, true},
		{Assertion{Type: "contains-all", Value: json.RawMessage(`["Paris", "Spain"]`)}, false},
		{Assertion{Type: "icontains-all", Value: json.RawMessage(`["paris", "france"]`)}, true},
		{Assertion{Type: "equals", Value: json.RawMessage(`"Paris"`)}, false},
		{Assertion{Type: "not-equals", Value: json.RawMessage(`"Paris"`)}, true},
		{Assertion{Type: "starts-with", Value: json.RawMessage(`"Paris"`)}, true},
		{Assertion{Type: "regex", Value: json.RawMessage(`"capital of [A-Z][a-z]+"`)}, true},
		{Assertion{Type: "not-regex", Value: json.RawMessage(`"^\\d"`)}, true},
		{Assertion{Type: "is-json"}, false},
		{Assertion{Type: "contains-json"}, true},
		{Assertion{Type: "contains-json", Value: json.RawMessage(`{"required": ["city"]}`)}, true},
		{Assertion{Type: "contains-json", Value: json.RawMessage(`{"required": ["country"]}`)}, false},
		{Assertion{Type: "levenshtein", Value: json.RawMessage(`"Paris is the capital of France. {\"city\": \"Paris\", \"pop\": 3}"`)}, true},
		{Assertion{Type: "levenshtein", Value: json.RawMessage(`"Rome"`), Threshold: f(5)}, false},
		{Assertion{Type: "latency", Threshold: f(200)}, true},
		{Assertion{Type: "latency", Threshold: f(100)}, false},
		{Assertion{Type: "cost", Threshold: f(0.002)}, true}, // 100×10/1e6 + 50×20/1e6 = 0.002
		{Assertion{Type: "cost", Threshold: f(0.0019)}, false},
		{Assertion{Type: "tokens", Threshold: f(150)}, true},
		{Assertion{Type: "tokens", Threshold: f(149)}, false},
	} {
		t.Run(tc.a.Type+" "+string(tc.a.Value), func(t *testing.T) {
			cs, err := compileAssertions([]Assertion{tc.a}, o.prices, "test")
			require.NoError(t, err)
			pass, why := cs[0].eval(o)
			require.Equal(t, tc.pass, pass, why)
			if !pass {
				require.Contains(t, why, tc.a.Type+": ")
			}
		})
	}
	t.Run("equals JSON", func(t *testing.T) {
		cs, err := compileAssertions([]Assertion{{Type: "equals", Value: json.RawMessage(`{"a": [1, 2.0]}`)}}, nil, "test")
		require.NoError(t, err)
		pass, why := cs[0].eval(observed{response: ` {"a": [1, 2]} `})
		require.True(t, pass, why)
	})
	t.Run("is-json with a schema", func(t *testing.T) {
		cs, err := compileAssertions([]Assertion{{Type: "is-json", Value: json.RawMessage(`{"type": "object", "required": ["ok"]}`)}}, nil, "test")
		require.NoError(t, err)
		pass, _ := cs[0].eval(observed{response: "```json\n{\"ok\": true}\n```"})
		require.True(t, pass)
		pass, why := cs[0].eval(observed{response: `{"no": 1}`})
		require.False(t, pass)
		require.Contains(t, why, "does not match the schema")
	})
}

func TestAssertionErrors(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		a    Assertion
		want string
	}{
		{Assertion{Type: "llm-rubric"}, `unsupported assertion type "llm-rubric"`},
		{Assertion{Type: "not-latency", Threshold: f(1)}, "latency cannot be negated"},
		{Assertion{Type: "contains"}, "value must be a string"},
		{Assertion{Type: "contains-any", Value: json.RawMessage(`[]`)}, "value lists no strings"},
		{Assertion{Type: "regex", Value: json.RawMessage(`"(a"`)}, "value is not a regular expression"},
		{Assertion{Type: "is-json", Value: json.RawMessage(`{"type": 5}`)}, "value is not a usable JSON Schema"},
		{Assertion{Type: "latency"}, "threshold (milliseconds, 0 or more) is required"},
		{Assertion{Type: "cost", Threshold: f(1)}, "cost needs the model's prices"},
		{Assertion{Type: "contains", Value: json.RawMessage(`"x"`), Weight: f(-1)}, "weight -1 must not be negative"},
	} {
		t.Run(tc.a.Type, func(t *testing.T) {
			_, err := compileAssertions([]Assertion{tc.a}, nil, "test query 2")
			require.ErrorContains(t, err, "test query 2 assertion 1 ("+tc.a.Type+"): "+tc.want)
		})
	}
}

func TestRulesTierWeightsAndThreshold(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	cs, err := compileAssertions([]Assertion{
		{Type: "contains", Value: json.RawMessage(`"a"`), Weight: f(3)},
		{Type: "contains", Value: json.RawMessage(`"zzz"`), Weight: f(1)},
		{Type: "contains", Value: json.RawMessage(`"zzz"`), Weight: f(0)}, // recorded, not counted
	}, nil, "test")
	require.NoError(t, err)
	o := observed{response: "abc"}
	r := rulesTier(o, "", cs, nil)
	require.False(t, r.Pass, "without a threshold every counted assertion must pass")
	require.Equal(t, 0.75, r.Score)
	require.Equal(t, `contains: the response contains "zzz"`, r.Reason)
	r = rulesTier(o, "", cs, f(0.7))
	require.True(t, r.Pass, "a threshold passes on the weighted score")
	r = rulesTier(o, "", cs, f(0.8))
	require.False(t, r.Pass)
	r = rulesTier(o, "", nil, nil)
	require.True(t, r.Pass)
	require.Equal(t, 1.0, r.Score)
}

func TestBudget(t *testing.T) {
	b := newBudget(1000, 0)
	admitted := 0
	for b.admit(300) {
		admitted++
	}
	require.Equal(t, 4, admitted, "calls are admitted while spent plus reserved is under the limit")
	for range admitted {
		b.settle(300, 290)
	}
	require.Equal(t, 1160, b.Spent())
	require.LessOrEqual(t, b.Spent(), 1000+300, "at most one call's worth over the budget")
	require.False(t, b.admit(1))
	require.False(t, newBudget(0, 0).admit(1), "a budget of 0 admits nothing")
	require.False(t, newBudget(100, 100).admit(1), "a resumed run starts from what the stored trials spent")
}

func TestPlanInterleavesVersions(t *testing.T) {
	s := Spec{Versions: []VersionSpec{{Version: 1}, {Version: 2}}, Queries: make([]Query, 2), Repetitions: 2}
	var keys []string
	for _, k := range s.plan() {
		keys = append(keys, k.step())
	}
	require.Equal(t, []string{
		"trial/1/0/0", "trial/2/0/0", "trial/1/0/1", "trial/2/0/1",
		"trial/1/1/0", "trial/2/1/0", "trial/1/1/1", "trial/2/1/1",
	}, keys)
}

func TestRubricFromWeights(t *testing.T) {
	r, rej := rubricFrom([]rubricIn{{Name: "accuracy", Weight: 2}, {Name: "tone", Weight: 1}, {Name: "unused", Weight: 0}})
	require.Nil(t, rej)
	require.Equal(t, []Criterion{{Name: "accuracy", Points: 2}, {Name: "tone", Points: 1}}, r)
	r, rej = rubricFrom([]rubricIn{{Name: "accuracy", Weight: 0.75}, {Name: "tone", Weight: 0.25}})
	require.Nil(t, rej)
	require.Equal(t, []Criterion{{Name: "accuracy", Points: 75}, {Name: "tone", Points: 25}}, r)
	_, rej = rubricFrom([]rubricIn{{Name: "a", Weight: 0}})
	require.NotNil(t, rej)
	_, rej = rubricFrom([]rubricIn{{Name: "a", Weight: 1}, {Name: "A", Weight: 1}})
	require.NotNil(t, rej)
	require.Contains(t, rej.reason, "appears twice")
	r, rej = rubricFrom(nil)
	require.Nil(t, rej)
	require.Len(t, r, 4)
}
