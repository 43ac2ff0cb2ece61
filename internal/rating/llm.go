package rating

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/provider"
)

// Completer sends one chat completion; *provider.Chat satisfies it. It
// must end within its own timeout, and classify failures as provider.Chat
// does: ErrUnavailable (also bus.Unavailable) for an outage, ErrRejected
// and ErrBadOutput for a failure of this request alone.
type Completer interface {
	Complete(ctx context.Context, req provider.ChatRequest) (provider.ChatResponse, error)
}

var _ Completer = (*provider.Chat)(nil)

const (
	// ratingMaxTokens is the completion ceiling of a rating: the answer
	// is one small JSON object.
	ratingMaxTokens = 300
	// ratingAttempts is how many times a model that answers with
	// something unusable is asked before the rules take over.
	ratingAttempts = 2
	// summaryInputFactor bounds the output sent to be summarised, in
	// multiples of MaxInputTokens.
	summaryInputFactor = 8
)

// promptCustom is the tier-3 instruction of a prompt use's rating: the
// rating prompt speaks of tool calls, and a prompt use is rated as one.
const promptCustom = `This "tool call" is one use of a prompt version from agentq's prompt library in an agent's run: the agent's task is the input the prompt was applied to, the input names the prompt version, and the output is the answer the model produced with it. Rate how well that answer serves the task.`

// plan is the LLM work for one event, prepared before any call so its
// cost can be estimated against the budget.
type plan struct {
	call     Call
	input    chat.RatingInput   // untrusted fields already cut to MaxInputTokens
	rating   chat.Conversation  // the rating request as it stands
	summary  *chat.Conversation // set when the output is summarised first
	target   int                // summary size asked for, in tokens
	estimate int                // tokens the calls should cost
	// summaryEstimate is the summary's share of estimate.
	summaryEstimate int
	notes           []string // query and input cuts, for the reason
	outputCut       bool     // the output was cut to MaxInputTokens
	// key is the event's, budget the tenant's day its tokens are
	// charged to (set by decide).
	key    database.InboxKey
	budget budgetKey
}

// summary is the model's summary of an event's output, kept for the
// event's next delivery when its rating did not happen.
type summary struct {
	text   string
	cut    bool
	tokens int // what it cost
}

// ratingInput is what the rating prompt shows of c, before cutting.
func ratingInput(c Call) chat.RatingInput {
	if c.Target == TargetTool {
		return chat.RatingInput{ToolName: c.ToolName, Input: c.Input, Output: c.Output}
	}
	ref := fmt.Sprintf(`{"prompt_id": %q, "version": %d}`, c.PromptID, c.Version)
	if c.PromptHash != "" {
		ref = fmt.Sprintf(`{"prompt_hash": %q}`, c.PromptHash)
	}
	return chat.RatingInput{ToolName: "prompt:" + c.Key(), Custom: promptCustom, Query: c.Input, Input: ref, Output: c.Output}
}

// newPlan prepares the rating of c: untrusted text cut to MaxInputTokens
// each, or the output summarised first when it is longer and Summarize is
// on.
func (r *Rater) newPlan(c Call) (*plan, error) {
	limit := r.opts.Rater.MaxInputTokens
	p := &plan{call: c, input: ratingInput(c)}
	if r.opts.Rater.Summarize && r.counter.CountTokens(p.input.Output) > limit {
		p.target = max(limit/2, 32)
		in := chat.ToolSummaryInput{ToolName: p.input.ToolName, Query: p.input.Query, Input: p.input.Input, Output: p.input.Output, TargetTokens: p.target}
		in.Query, _ = Truncate(in.Query, limit, r.counter)
		in.Input, _ = Truncate(in.Input, limit, r.counter)
		in.Output, _ = Truncate(in.Output, summaryInputFactor*limit, r.counter)
		msgs, err := r.builder.ToolSummaryMessages(in)
		if err != nil {
			return nil, err
		}
		conv := r.conversation(limit).Append(msgs...)
		p.summary = &conv
		p.summaryEstimate = conv.TokenCount() + limit
		p.estimate += p.summaryEstimate
	}
	for _, f := range []struct {
		name string
		text *string
	}{{"query", &p.input.Query}, {"input", &p.input.Input}, {"output", &p.input.Output}} {
		if t, ok := Truncate(*f.text, limit, r.counter); ok {
			*f.text = t
			if f.name == "output" {
				p.outputCut = true
			} else {
				p.notes = append(p.notes, fmt.Sprintf("%s cut to %d tokens", f.name, limit))
			}
		}
	}
	msgs, err := r.builder.RatingMessages(p.input)
	if err != nil {
		return nil, err
	}
	p.rating = r.conversation(ratingMaxTokens).Append(msgs...)
	p.estimate += p.rating.TokenCount() + ratingMaxTokens
	return p, nil
}

func (r *Rater) conversation(maxTokens int) chat.Conversation {
	return chat.New(r.opts.Model).WithCounter(r.counter).WithTemperature(0).WithMaxTokens(maxTokens)
}

// outcome is a rating and, when the rules stood in for the LLM, why.
type outcome struct {
	Rating
	fallback string // "", "injection", "rejected" or "bad_output"
}

// rateWithLLM runs p's calls. An outage (or a cancelled ctx) returns an error
// marked bus.Unavailable: the event waits, nothing is rated. A model that
// refuses the request or keeps answering junk gets the rules' rating
// instead, with the failure in the reason and the tokens it cost.
//
// Every call's tokens are put down to be charged the moment it returns
// (r.unbilled), whatever happens next: a summary followed by an outage of
// the rating call is paid for, and charged, once; the summary is kept for
// the next delivery, which does not pay for it again.
func (r *Rater) rateWithLLM(ctx context.Context, p *plan) (outcome, error) {
	start := time.Now()
	tokens := 0
	spend := func(n int) {
		tokens += n
		r.unbilled.add(p.budget, n)
	}
	in := p.input
	notes := append([]string(nil), p.notes...)
	if p.summary != nil {
		var err error
		sum, kept := r.summaries.get(p.key)
		if kept {
			tokens += sum.tokens // charged when it was made
		} else {
			var resp provider.ChatResponse
			resp, err = r.opts.LLM.Complete(ctx, provider.ChatRequest{OpenAIRequest: p.summary.OpenAIRequest()})
			n := r.usage(*p.summary, resp)
			spend(n)
			if err == nil {
				sum.text, sum.cut = Truncate(strings.TrimSpace(resp.Content), r.opts.Rater.MaxInputTokens, r.counter)
				sum.tokens = n
			}
		}
		switch {
		case err == nil:
			summary, cut := sum.text, sum.cut
			if hit, ok := Detect("summary", summary); ok {
				rt := Rules(p.call)
				rt.Injection = true
				rt.Relevance, rt.Correctness = min(rt.Relevance, injectionCap), min(rt.Correctness, injectionCap)
				rt.Reason = rt.Reason + "; the model's summary of the output " + strings.TrimPrefix(hit.String(), "summary ") + ": not rated by the model (rating capped at 0.5)"
				rt.Tokens, rt.LatencyMs = tokens, time.Since(start).Milliseconds()
				return outcome{rt, "injection"}, nil
			}
			r.summaries.put(p.key, sum) // until the event is claimed
			in.Output = summary
			notes = append(notes, fmt.Sprintf("output summarised by the model (over %d tokens)", r.opts.Rater.MaxInputTokens))
			if cut {
				notes = append(notes, "summary cut")
			}
		case interrupted(ctx, err):
			return outcome{}, bus.Unavailable(fmt.Errorf("summary interrupted: %w", err))
		case bus.IsUnavailable(err):
			return outcome{}, err
		default:
			notes = append(notes, "summary failed ("+oneLine(errorText(err), 120)+"), output cut instead")
		}
	} else if p.outputCut {
		notes = append(notes, fmt.Sprintf("output cut to %d tokens", r.opts.Rater.MaxInputTokens))
	}
	conv := p.rating
	if in.Output != p.input.Output {
		msgs, err := r.builder.RatingMessages(in)
		if err != nil {
			return outcome{}, bus.Permanent(err)
		}
		conv = r.conversation(ratingMaxTokens).Append(msgs...)
	}
	req := provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), JSON: true}
	var failure error
	for range ratingAttempts {
		resp, err := r.opts.LLM.Complete(ctx, req)
		spend(r.usage(conv, resp))
		if err == nil {
			rt, perr := chat.ParseRating(resp.Content)
			if perr == nil {
				out := Rating{
					Relevance: round(clamp01(rt.Relevance)), Correctness: round(clamp01(rt.Correctness)),
					Kind: KindLLM, Rater: llmRater(resp.Model, r.opts.Model),
					Tokens: tokens, LatencyMs: time.Since(start).Milliseconds(),
				}
				out.Reason = strings.TrimSpace(rt.Reason)
				if len(notes) > 0 {
					out.Reason = strings.TrimSpace(out.Reason + " [" + strings.Join(notes, "; ") + "]")
				}
				return outcome{Rating: out}, nil
			}
			err = fmt.Errorf("%w: %w", provider.ErrBadOutput, perr)
		}
		switch {
		case interrupted(ctx, err):
			return outcome{}, bus.Unavailable(fmt.Errorf("rating interrupted: %w", err))
		case bus.IsUnavailable(err):
			return outcome{}, err
		case errors.Is(err, provider.ErrRejected), errors.Is(err, provider.ErrBadOutput):
			failure = err
		default:
			return outcome{}, err // unclassified: retry the event later
		}
		if errors.Is(err, provider.ErrRejected) {
			break // the same request is refused again
		}
	}
	reason := "bad_output"
	if errors.Is(failure, provider.ErrRejected) {
		reason = "rejected"
	}
	rt := Rules(p.call)
	rt.Reason = fmt.Sprintf("%s gave no usable rating (%s); rated by %s instead: %s",
		llmRater("", r.opts.Model), oneLine(errorText(failure), 300), RulesRater, strings.TrimPrefix(rt.Reason, RulesRater+": "))
	rt.Tokens, rt.LatencyMs = tokens, time.Since(start).Milliseconds()
	return outcome{rt, reason}, nil
}

// usage is the tokens resp cost: the server's count, else an estimate
// from the request and the answer.
func (r *Rater) usage(conv chat.Conversation, resp provider.ChatResponse) int {
	if resp.Usage.TotalTokens > 0 {
		return resp.Usage.TotalTokens
	}
	if resp.Content == "" {
		return 0 // no answer (refused, cut off): nothing to count
	}
	return conv.TokenCount() + r.counter.CountTokens(resp.Content)
}

// interrupted reports whether err ended the call because ctx ended (a
// shutdown, or the batch's time ran out): not the event's fault.
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// llmRater is the rater field of an LLM rating: llm:<model>, with the
// model as the server named it, else as configured.
func llmRater(answered, configured string) string {
	m := strings.Join(strings.Fields(answered), "_")
	if m == "" {
		m = strings.Join(strings.Fields(configured), "_")
	}
	if m == "" {
		m = "unknown"
	}
	if len(m) > 250 {
		m = m[:250]
	}
	return KindLLM + ":" + m
}

// errorText is err's message without the endpoint prefix the provider
// puts first, which says nothing about the event.
func errorText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if i := strings.Index(s, ": provider "); i >= 0 {
		return s[i+2:]
	}
	return s
}
