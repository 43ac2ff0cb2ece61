package chat

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Compactor shrinks a conversation. Compaction happens only when a caller
// calls Compact; nothing in this package compacts on its own. A Compactor
// returns a new Conversation and leaves its argument unchanged; it should
// stop and return ctx.Err() when ctx is cancelled.
type Compactor interface {
	Compact(ctx context.Context, c Conversation) (Conversation, error)
}

// Summarizer condenses messages into one text, usually with an LLM call. It
// should return ctx.Err() when ctx is cancelled.
type Summarizer interface {
	Summarize(ctx context.Context, msgs []Message) (string, error)
}

// SummarizerFunc adapts a function to Summarizer.
type SummarizerFunc func(ctx context.Context, msgs []Message) (string, error)

// Summarize calls f.
func (f SummarizerFunc) Summarize(ctx context.Context, msgs []Message) (string, error) {
	return f(ctx, msgs)
}

// Compaction errors.
var (
	ErrNoSummarizer = errors.New("chat: compaction needs a summarizer")
	ErrOverBudget   = errors.New("chat: conversation does not fit the token budget")
)

var (
	_ Compactor  = SummarizeHistory{}
	_ Compactor  = Truncate{}
	_ Summarizer = SummarizerFunc(nil)
)

// Compact returns the result of s compacting c.
func (c Conversation) Compact(ctx context.Context, s Compactor) (Conversation, error) {
	if s == nil {
		return c, fmt.Errorf("chat: compact: no compactor")
	}
	return s.Compact(ctx, c)
}

// SummarizeHistory keeps the first system message and replaces every other
// message with one assistant message, marked as a summary, holding what
// Summarizer makes of them. A conversation with nothing besides that system
// message is returned as it is, without calling Summarizer.
type SummarizeHistory struct {
	Summarizer Summarizer
}

// Compact implements Compactor.
func (s SummarizeHistory) Compact(ctx context.Context, c Conversation) (Conversation, error) {
	if s.Summarizer == nil {
		return c, ErrNoSummarizer
	}
	sys, rest := splitSystem(c.messages)
	if len(rest) == 0 {
		return c, nil
	}
	text, err := s.Summarizer.Summarize(ctx, rest)
	if err != nil {
		return c, fmt.Errorf("chat: summarize %d messages: %w", len(rest), err)
	}
	if strings.TrimSpace(text) == "" {
		return c, fmt.Errorf("chat: summarize %d messages: summarizer returned an empty summary", len(rest))
	}
	out := make([]Message, 0, 2)
	if !sys.IsZero() {
		out = append(out, sys)
	}
	return c.withMessages(append(out, Summary(text))), nil
}

// Truncate drops the oldest turns until the conversation fits Budget tokens,
// as counted by the conversation's counter. It always keeps the first
// system message, placed first, and the newest turn, and returns an error
// wrapping ErrOverBudget when even those do not fit.
//
// A turn starts at a user message (text or media) that follows a non-user
// message and runs to the next such start, so a tool call is always dropped
// together with its result and never leaves a dangling tool_call_id.
// Messages before the first user message form a turn of their own.
type Truncate struct {
	Budget int
}

// Compact implements Compactor.
func (t Truncate) Compact(ctx context.Context, c Conversation) (Conversation, error) {
	if t.Budget <= 0 {
		return c, fmt.Errorf("chat: truncate: budget %d must be positive", t.Budget)
	}
	if err := ctx.Err(); err != nil {
		return c, err
	}
	if c.TokenCount() <= t.Budget {
		return c, nil
	}
	counter := c.Counter()
	sys, rest := splitSystem(c.messages)
	turns := splitTurns(rest)

	// Count each turn once; dropping a turn removes its cost exactly,
	// because the per-message framing is part of each message's count.
	total := tokensPerReply
	if !sys.IsZero() {
		total += messageTokens(counter, sys)
	}
	costs := make([]int, len(turns))
	for i, turn := range turns {
		for _, m := range turn {
			costs[i] += messageTokens(counter, m)
		}
		total += costs[i]
	}
	first := 0
	for total > t.Budget && first < len(turns)-1 {
		total -= costs[first]
		first++
	}
	if total > t.Budget {
		return c, fmt.Errorf("%w: system message and newest turn need %d tokens, budget is %d", ErrOverBudget, total, t.Budget)
	}
	out := make([]Message, 0, len(rest)+1)
	if !sys.IsZero() {
		out = append(out, sys)
	}
	for _, turn := range turns[first:] {
		out = append(out, turn...)
	}
	return c.withMessages(out), nil
}

// splitSystem separates the first system message from the others, which keep
// their order.
func splitSystem(msgs []Message) (Message, []Message) {
	for i, m := range msgs {
		if m.kind == KindText && m.role == RoleSystem {
			rest := make([]Message, 0, len(msgs)-1)
			rest = append(rest, msgs[:i]...)
			return m, append(rest, msgs[i+1:]...)
		}
	}
	return Message{}, msgs
}

// splitTurns groups msgs into turns as Truncate describes.
func splitTurns(msgs []Message) [][]Message {
	var turns [][]Message
	start := 0
	for i := 1; i < len(msgs); i++ {
		if msgs[i].role == RoleUser && msgs[i-1].role != RoleUser {
			turns = append(turns, msgs[start:i])
			start = i
		}
	}
	if start < len(msgs) {
		turns = append(turns, msgs[start:])
	}
	return turns
}
