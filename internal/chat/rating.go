package chat

import (
	"fmt"
	"strings"
)

// RatingInput is one tool call for the rater to rate.
type RatingInput struct {
	// ToolName is the tool that was called; required.
	ToolName string
	// ToolDescription is the tool's own description. It comes from the tool
	// server, so it is fenced as untrusted.
	ToolDescription string
	// Source is the tool server or namespace, whose tier-2 instructions
	// (for example "an empty list is a normal answer") apply.
	Source string
	// Custom is tier-3 text for this rating.
	Custom string
	// Query is the task the agent was working on, if known; it helps judge
	// relevance.
	Query string
	// Input is the call's arguments, usually JSON.
	Input string
	// Output is what the tool returned; empty output is rated too. When it
	// is too large to rate whole, summarise it first with
	// ToolSummaryMessages and rate the summary.
	Output string
}

// RatingMessages returns the system and user messages asking a model to
// rate a tool call's output for relevance and correctness. The model is
// asked to answer with the JSON object ParseRating reads:
//
//	{"relevance": 0.9, "correctness": 0.8, "reason": "..."}
func (b *Builder) RatingMessages(in RatingInput) ([]Message, error) {
	name := inline(in.ToolName)
	if name == "" {
		return nil, fmt.Errorf("%w: rating input has no tool name", ErrInvalid)
	}
	sys := b.ratingSystemPrompt(in.Source, in.Custom)

	var user strings.Builder
	user.Grow(len(in.ToolDescription) + len(in.Query) + len(in.Input) + len(in.Output) + 512)
	user.WriteString("Rate the output of this tool call.\n\n## Tool\n\nName: ")
	user.WriteString(name)
	if strings.TrimSpace(in.ToolDescription) != "" {
		user.WriteString("\n\nDescription:\n")
		writeFence(&user, FenceToolDescription, in.ToolDescription)
	}
	if strings.TrimSpace(in.Query) != "" {
		user.WriteString("\n\n## Agent's Task\n\n")
		writeFence(&user, FenceUserQuery, in.Query)
	}
	user.WriteString("\n\n## Input\n\n")
	writeFence(&user, FenceToolInput, in.Input)
	user.WriteString("\n\n## Output\n\n")
	writeFence(&user, FenceToolOutput, in.Output)
	user.WriteString("\n\nAnswer with the JSON object only.")
	return []Message{System(sys), User(user.String())}, nil
}

// maxRatingCache bounds the memo of rating system prompts. Sources and
// custom texts come from configuration, so a few dozen entries is normal;
// past the bound prompts are built each time, never evicted, which keeps
// the memo simple and its memory fixed.
const maxRatingCache = 256

// ratingKey identifies a rating system prompt. It holds the tier-2 text
// itself, not just the source name, so instructions that change at run
// time are never served stale.
type ratingKey struct {
	source, sourceText, custom string
}

// ratingSystemPrompt returns the rating system prompt for source and
// custom, from the memo when it can: it is the same for every tool call of
// a source, and building it is half the work and most of the garbage of
// RatingMessages.
func (b *Builder) ratingSystemPrompt(source, custom string) string {
	tier2 := b.resolve(sources(source))
	key := ratingKey{source: source, custom: custom}
	if len(tier2) == 1 {
		key.sourceText = tier2[0].text
	}
	if v, ok := b.ratingSystem.Load(key); ok {
		return v.(string)
	}
	var sys strings.Builder
	sys.Grow(len(ratingInstructions) + len(untrustedNotice) + len(ratingAnswerFormat) + len(key.sourceText) + len(custom) + 128)
	writeTiers(&sys, "Rating Instructions", ratingInstructions, tier2, custom)
	writeUntrusted(&sys)
	sys.WriteString("\n\n## Answer Format\n\n")
	sys.WriteString(ratingAnswerFormat)
	prompt := sys.String()
	if b.ratingCached.Load() < maxRatingCache {
		if _, loaded := b.ratingSystem.LoadOrStore(key, prompt); !loaded {
			b.ratingCached.Add(1)
		}
	}
	return prompt
}

func sources(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// Rating is a model's rating of one tool call's output.
type Rating struct {
	// Relevance is how well the output addresses the call, from 0 to 1.
	Relevance float64 `json:"relevance"`
	// Correctness is how likely the output is accurate and well-formed,
	// from 0 to 1.
	Correctness float64 `json:"correctness"`
	// Reason is the model's explanation; it may be empty.
	Reason string `json:"reason"`
}

// Score returns the mean of relevance and correctness, the single figure
// the rater stores.
func (r Rating) Score() float64 { return (r.Relevance + r.Correctness) / 2 }

// ParseRating reads the rating in a model's reply to RatingMessages. It
// uses the last JSON object with relevance and correctness in the reply,
// so prose, a ```json fence or a quoted example before the answer do not
// matter, and checks that both are numbers from 0 to 1.
// Errors wrap ErrNoAnswer when there is no object with both fields, and
// ErrBadAnswer when a field is invalid.
func ParseRating(text string) (Rating, error) {
	obj, err := findObject(text, "relevance", "correctness")
	if err != nil {
		return Rating{}, fmt.Errorf("parse rating: %w", err)
	}
	var r Rating
	if r.Relevance, err = unitField(obj, "relevance"); err != nil {
		return Rating{}, fmt.Errorf("parse rating: %w", err)
	}
	if r.Correctness, err = unitField(obj, "correctness"); err != nil {
		return Rating{}, fmt.Errorf("parse rating: %w", err)
	}
	if r.Reason, err = stringField(obj, "reason"); err != nil {
		return Rating{}, fmt.Errorf("parse rating: %w", err)
	}
	return r, nil
}
