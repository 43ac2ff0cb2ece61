package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/report"
)

// What a judge placeholder stands for.
const (
	// PlaceholderBudget: the experiment's judge budget was spent; the
	// verdict is the neutral one (pass, score 0.5, "budget
	// exhausted") and the report counts the trial as not judged.
	PlaceholderBudget = "budget_exhausted"
	// PlaceholderError: the judge could not give a verdict (it answered
	// junk, refused, or was unreachable after its retries); the verdict is
	// neutral too, and the report warns.
	PlaceholderError = "judge_error"
)

// placeholderScore is the score of an unjudged trial: the middle of the
// scale.
const placeholderScore = 0.5

// judgeMaxTokens bounds a judge's answer: a verdict is a small JSON
// object. It is also the answer's share of a call's reservation against
// the budget.
const judgeMaxTokens = 400

// Completer sends one chat completion; *provider.Chat satisfies it.
type Completer interface {
	Complete(ctx context.Context, req provider.ChatRequest) (provider.ChatResponse, error)
}

var _ Completer = (*provider.Chat)(nil)

// budget is an experiment's judge tokens. A call is admitted only while
// what was spent plus what calls in flight reserved stays under the
// limit, each reserving its prompt (counted before it is sent) plus the
// most it may answer; so the spend ends at most one call's worth over the
// limit, however many calls run at once.
type budget struct {
	mu                     sync.Mutex
	limit, spent, reserved int
}

func newBudget(limit, spent int) *budget { return &budget{limit: limit, spent: spent} }

// admit reserves est tokens for a call, or reports that the budget is
// exhausted.
func (b *budget) admit(est int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spent+b.reserved >= b.limit {
		return false
	}
	b.reserved += est
	return true
}

// settle replaces a call's reservation with what it cost.
func (b *budget) settle(est, actual int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserved -= est
	b.spent += actual
}

// Spent returns the tokens spent so far.
func (b *budget) Spent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spent
}

// limiter bounds the model calls in flight in one lab copy.
type limiter chan struct{}

func (l limiter) acquire(ctx context.Context) (func(), error) {
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// judge is tier 3 of one experiment.
type judge struct {
	llm     Completer
	limit   limiter
	model   string
	rubric  chat.Rubric
	builder *chat.Builder
	counter chat.TokenCounter
	budget  *budget
}

// eval asks the judge about response and returns its verdict and the
// tokens the call cost. The error is only ever ctx's: anything else the
// judge does wrong gives a placeholder verdict, since it is no fault of
// the response.
func (jd *judge) eval(ctx context.Context, query, reference, response string) (TierResult, int, error) {
	r := TierResult{Tier: report.TierJudge}
	neutral := func(kind, reason string) TierResult {
		r.Pass, r.Score, r.Placeholder, r.Reason = true, placeholderScore, kind, reason
		return r
	}
	msgs, err := jd.builder.JudgeMessages(chat.JudgeInput{Query: query, Response: response, Reference: reference, Rubric: jd.rubric})
	if err != nil {
		return neutral(PlaceholderError, "judge prompt: "+err.Error()), 0, nil
	}
	conv := chat.New(jd.model).WithTemperature(0).WithMaxTokens(judgeMaxTokens).WithCounter(jd.counter).Append(msgs...)
	prompt := conv.TokenCount()
	est := prompt + judgeMaxTokens
	if !jd.budget.admit(est) {
		return neutral(PlaceholderBudget, "budget exhausted"), 0, nil
	}
	release, err := jd.limit.acquire(ctx)
	if err != nil {
		jd.budget.settle(est, 0)
		return r, 0, err
	}
	resp, err := jd.llm.Complete(ctx, provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), JSON: true})
	release()
	if ctx.Err() != nil {
		// Cut off: the call may have cost tokens, which a resumed run
		// cannot know of; count the reservation's prompt share.
		jd.budget.settle(est, prompt)
		return r, 0, context.Cause(ctx)
	}
	spent := 0
	if err == nil || errors.Is(err, provider.ErrBadOutput) {
		spent = usageOr(resp, prompt, jd.counter) // answered: the tokens are spent, usable or not
	}
	jd.budget.settle(est, spent)
	if err != nil {
		return neutral(PlaceholderError, "judge: "+err.Error()), spent, nil
	}
	v, err := chat.ParseJudgement(resp.Content, jd.rubric)
	if err != nil {
		return neutral(PlaceholderError, "judge: "+err.Error()), spent, nil
	}
	r.Pass, r.Score, r.Reason = v.Pass, v.Score, v.Reason
	if r.Score < 0 || r.Score > 1 {
		return neutral(PlaceholderError, fmt.Sprintf("judge: score %v outside [0, 1]", r.Score)), spent, nil
	}
	return r, spent, nil
}

// usageOr is the tokens a call cost: the server's usage, or, when it sent
// none, the prompt as counted before sending plus the answer counted with
// the same tokenizer, so a budget holds against servers that omit usage.
func usageOr(resp provider.ChatResponse, prompt int, counter chat.TokenCounter) int {
	if resp.Usage.TotalTokens > 0 {
		return resp.Usage.TotalTokens
	}
	return prompt + counter.CountTokens(resp.Content)
}
