package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/provider"
)

// Trial is one run of one version on one test query, as stored (a step of
// the experiment's job) the moment it finishes.
type Trial struct {
	Version    int `json:"version"`
	Query      int `json:"query"` // index into the request's test_queries
	Repetition int `json:"repetition"`
	// Response is the model's answer, cut at MaxStoredResponse bytes
	// (the tiers judged all of it).
	Response string `json:"response"`
	// Error says why the call failed (after its retries); such a trial
	// counts in error_rate, with no tiers.
	Error            string  `json:"error,omitempty"`
	DurationMs       float64 `json:"duration_ms"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	// TokensCounted: the provider sent no usage, so the tokens were
	// counted here with the model's tokenizer (or an estimate).
	TokensCounted bool         `json:"tokens_counted,omitempty"`
	Pass          bool         `json:"pass"`
	Score         float64      `json:"score"`
	Tiers         []TierResult `json:"tiers,omitempty"`
	// JudgeTokens is what the LLM judge spent on this trial.
	JudgeTokens int `json:"judge_tokens,omitempty"`
	// ToolCalls counts the tools the answer called, by name (the version's
	// tools are offered with every call).
	ToolCalls map[string]int `json:"tool_calls,omitempty"`
}

// MaxStoredResponse bounds the response text kept with a trial.
const MaxStoredResponse = 16 << 10

// trialKey names a trial; its step key is "trial/<version>/<query>/<repetition>".
type trialKey struct {
	vi, version, query, rep int
}

func (k trialKey) step() string { return fmt.Sprintf("trial/%d/%d/%d", k.version, k.query, k.rep) }

// isTrialStep reports whether a step key names a trial.
func isTrialStep(step string) bool { return strings.HasPrefix(step, "trial/") }

// plan lists the trials in the order they start: query by query, each
// repetition of every version together, so that whatever stops the
// experiment early (a timeout, the judge's budget) leaves every version
// with the same queries.
func (s Spec) plan() []trialKey {
	out := make([]trialKey, 0, s.Trials())
	for q := range s.Queries {
		for r := range s.Repetitions {
			for vi, v := range s.Versions {
				out = append(out, trialKey{vi: vi, version: v.Version, query: q, rep: r})
			}
		}
	}
	return out
}

// evaluator is an experiment's compiled evaluation.
type evaluator struct {
	spec       Spec
	structural []structural // per version
	defaults   []check
	perQuery   [][]check
	judge      *judge
}

func newEvaluator(s Spec, jd *judge) (*evaluator, error) {
	e := &evaluator{spec: s, judge: jd}
	var reqSchema *jsonschema.Schema
	if len(s.Eval.Schema) > 0 {
		sc, err := compileSchema(s.Eval.Schema)
		if err != nil {
			return nil, fmt.Errorf("response schema: %w", err)
		}
		reqSchema = sc
	}
	for _, v := range s.Versions {
		st := structural{format: s.Eval.Format, schema: reqSchema}
		if st.schema == nil && len(v.Schema) > 0 {
			sc, err := compileSchema(v.Schema)
			if err != nil {
				return nil, fmt.Errorf("version %d's response schema: %w", v.Version, err)
			}
			st.schema = sc
		}
		e.structural = append(e.structural, st)
	}
	var err error
	if e.defaults, err = compileAssertions(s.Eval.Assert, s.Eval.Prices, "evaluation"); err != nil {
		return nil, err
	}
	for i, q := range s.Queries {
		cs, err := compileAssertions(q.Assert, s.Eval.Prices, "test query "+strconv.Itoa(i+1))
		if err != nil {
			return nil, err
		}
		e.perQuery = append(e.perQuery, cs)
	}
	return e, nil
}

// trial runs one trial: the version rendered as the system message, the
// query as the user message, then the tiers, fail-fast. Only an
// interruption (ctx) is an error; a call that fails after its retries is
// a trial with Error set.
func (l *Lab) trial(ctx context.Context, e *evaluator, k trialKey) (Trial, error) {
	s := e.spec
	v, q := s.Versions[k.vi], s.Queries[k.query]
	t := Trial{Version: k.version, Query: k.query, Repetition: k.rep}
	system, err := library.Render(ctx, v.Content, v.Params, q.Vars, library.Limits{})
	if err != nil {
		if ctx.Err() != nil {
			return t, context.Cause(ctx)
		}
		t.Error = "render the version: " + err.Error()
		return t, nil
	}
	counter := chat.CounterForModel(s.Model)
	conv := chat.New(s.Model).WithTemperature(s.Temperature).WithCounter(counter).Append(chat.System(system), chat.User(q.Query))
	release, err := l.limit.acquire(ctx)
	if err != nil {
		return t, err
	}
	start := time.Now()
	resp, err := l.llm.Complete(ctx, provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), Tools: v.Tools})
	release()
	if ctx.Err() != nil {
		return t, context.Cause(ctx)
	}
	t.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	if resp.Latency > 0 {
		t.DurationMs = float64(resp.Latency.Microseconds()) / 1000
	}
	t.PromptTokens, t.CompletionTokens = resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	if resp.Usage.TotalTokens == 0 && (err == nil || resp.Content != "") {
		t.PromptTokens, t.CompletionTokens, t.TokensCounted = conv.TokenCount(), counter.CountTokens(resp.Content), true
	}
	if err != nil {
		t.Error = err.Error()
		return t, nil
	}
	t.ToolCalls = toolCalls(resp.ToolCalls)
	text := answerText(resp)
	if err := l.evaluate(ctx, e, k, &t, text); err != nil {
		return t, err
	}
	t.Response = text
	if len(t.Response) > MaxStoredResponse {
		t.Response = cutUTF8(t.Response, MaxStoredResponse) + "…"
	}
	return t, nil
}

// evaluate runs the enabled tiers in order, stopping at the first that
// fails. The trial passes when every tier that ran passed; its score is
// the mean of their scores (1 when no tier is enabled).
func (l *Lab) evaluate(ctx context.Context, e *evaluator, k trialKey, t *Trial, resp string) error {
	s := e.spec
	q := s.Queries[k.query]
	add := func(r TierResult) bool {
		t.Tiers = append(t.Tiers, r)
		return r.Pass
	}
	t.Pass, t.Score = true, 1
	defer func() {
		if len(t.Tiers) == 0 {
			return
		}
		sum := 0.0
		t.Pass = true
		for _, r := range t.Tiers {
			sum += r.Score
			t.Pass = t.Pass && r.Pass
		}
		t.Score = sum / float64(len(t.Tiers))
	}()
	if s.Eval.Structural && !add(e.structural[k.vi].eval(resp)) {
		return nil
	}
	if s.Eval.Rules {
		checks := append(append([]check(nil), e.defaults...), e.perQuery[k.query]...)
		threshold := q.Threshold
		if threshold == nil {
			threshold = s.Eval.Threshold
		}
		o := observed{response: resp, latencyMs: t.DurationMs, promptTokens: t.PromptTokens, completion: t.CompletionTokens, prices: s.Eval.Prices}
		if !add(rulesTier(o, q.Intent, checks, threshold)) {
			return nil
		}
	}
	if s.Eval.Judge {
		r, spent, err := e.judge.eval(ctx, q.Query, q.Reference, resp)
		t.JudgeTokens = spent
		if err != nil {
			return err
		}
		add(r)
	}
	return nil
}

// cutUTF8 cuts s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// providerRequest is a conversation as a plain chat request.
func providerRequest(conv chat.Conversation) provider.ChatRequest {
	return provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest()}
}
