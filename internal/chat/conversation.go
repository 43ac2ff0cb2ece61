package chat

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Conversation is an immutable LLM message context: the model, the
// generation settings and the ordered messages of one chat-completions call.
// Every method that changes something returns a new Conversation and leaves
// the receiver as it was, so a Conversation can be shared between goroutines
// and derived from concurrently.
//
// It is called Conversation rather than Context so that signatures such as
// Compact(ctx context.Context, ...) stay readable.
//
// The zero Conversation is empty and usable; New is the usual start.
type Conversation struct {
	model       string
	temperature float64
	hasTemp     bool
	maxTokens   int
	messages    []Message // never appended to in place: derivations copy
	counter     TokenCounter

	// tokens caches TokenCount. Each derivation gets a fresh one; copies of
	// the same value share it, which is right since they hold the same
	// messages.
	tokens *tokenCache
}

type tokenCache struct {
	once sync.Once
	n    int
}

// New returns an empty conversation for model.
func New(model string) Conversation {
	return Conversation{model: model, tokens: &tokenCache{}}
}

// derive returns a copy of c with a fresh token cache, for a method to change.
func (c Conversation) derive() Conversation {
	c.tokens = &tokenCache{}
	return c
}

// WithModel returns a copy of c for another model.
func (c Conversation) WithModel(model string) Conversation {
	d := c.derive()
	d.model = model
	return d
}

// WithTemperature returns a copy of c with the sampling temperature set.
func (c Conversation) WithTemperature(t float64) Conversation {
	d := c.derive()
	d.temperature, d.hasTemp = t, true
	return d
}

// WithMaxTokens returns a copy of c with the ceiling on generated tokens set;
// 0 removes it.
func (c Conversation) WithMaxTokens(n int) Conversation {
	d := c.derive()
	d.maxTokens = n
	return d
}

// WithCounter returns a copy of c that counts tokens with counter. Without
// one, TokenCount uses CounterForModel.
func (c Conversation) WithCounter(counter TokenCounter) Conversation {
	d := c.derive()
	d.counter = counter
	return d
}

// Append returns a copy of c with msgs added at the end. Zero messages are
// skipped, so optional messages can be passed unconditionally.
func (c Conversation) Append(msgs ...Message) Conversation {
	d := c.derive()
	// Clip so the append below always copies: two derivations of one
	// Conversation must never write into the same backing array.
	d.messages = slices.Clip(d.messages)
	for _, m := range msgs {
		if !m.IsZero() {
			d.messages = append(d.messages, m)
		}
	}
	return d
}

// withMessages returns a copy of c holding exactly msgs, which it takes over.
func (c Conversation) withMessages(msgs []Message) Conversation {
	d := c.derive()
	d.messages = slices.Clip(msgs)
	return d
}

// Model returns the model name.
func (c Conversation) Model() string { return c.model }

// Temperature returns the sampling temperature and whether one was set.
func (c Conversation) Temperature() (float64, bool) { return c.temperature, c.hasTemp }

// MaxTokens returns the ceiling on generated tokens, 0 when unset.
func (c Conversation) MaxTokens() int { return c.maxTokens }

// Len returns the number of messages.
func (c Conversation) Len() int { return len(c.messages) }

// Messages returns a copy of the messages, oldest first.
func (c Conversation) Messages() []Message { return slices.Clone(c.messages) }

// Counter returns the counter TokenCount uses.
func (c Conversation) Counter() TokenCounter {
	if c.counter != nil {
		return c.counter
	}
	return CounterForModel(c.model)
}

// TokenCount returns the tokens the messages cost as a chat-completions
// request, framing included. It is computed on first use and cached; the
// cache is safe under concurrent calls.
func (c Conversation) TokenCount() int {
	if c.tokens == nil {
		// The zero Conversation has no cache; count without one.
		return countTokens(c.Counter(), c.messages)
	}
	c.tokens.once.Do(func() { c.tokens.n = countTokens(c.Counter(), c.messages) })
	return c.tokens.n
}

func countTokens(counter TokenCounter, msgs []Message) int {
	if len(msgs) == 0 {
		return 0
	}
	n := tokensPerReply
	for _, m := range msgs {
		n += messageTokens(counter, m)
	}
	return n
}

// Validate reports settings an OpenAI-compatible API would reject: no model,
// no messages, a temperature outside [0, 2] or a negative token ceiling.
func (c Conversation) Validate() error {
	var problems []string
	if c.model == "" {
		problems = append(problems, "no model")
	}
	if len(c.messages) == 0 {
		problems = append(problems, "no messages")
	}
	if c.hasTemp && (c.temperature < 0 || c.temperature > 2) {
		problems = append(problems, fmt.Sprintf("temperature %g outside [0, 2]", c.temperature))
	}
	if c.maxTokens < 0 {
		problems = append(problems, fmt.Sprintf("max tokens %d is negative", c.maxTokens))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: conversation: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// String returns a one-line description for logs: model, message count,
// approximate tokens and the settings that are set. It never includes
// message content, which may be large or sensitive. The token figure comes
// from ApproxCounter so that logging never pays for exact counting.
func (c Conversation) String() string {
	var b strings.Builder
	b.WriteString("chat.Conversation{model=")
	b.WriteString(strconv.Quote(c.model))
	fmt.Fprintf(&b, " msgs=%d tokens≈%d", len(c.messages), countTokens(ApproxCounter{}, c.messages))
	if c.hasTemp {
		b.WriteString(" temp=" + strconv.FormatFloat(c.temperature, 'g', -1, 64))
	}
	if c.maxTokens != 0 {
		b.WriteString(" max=" + strconv.Itoa(c.maxTokens))
	}
	b.WriteString("}")
	return b.String()
}

// Text renders the messages as plain text, each under a [role] header and
// separated by a blank line, for logs, golden files and models without a
// chat format.
func (c Conversation) Text() string {
	var b strings.Builder
	for i, m := range c.messages {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("[")
		b.WriteString(m.header())
		b.WriteString("]\n")
		b.WriteString(m.text())
	}
	return b.String()
}
