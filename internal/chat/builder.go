package chat

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// InstructionSource looks up the per-source instructions (tier 2) of a tool
// server or namespace. It reports false for sources it does not know.
type InstructionSource interface {
	SourceInstructions(source string) (string, bool)
}

// SourceInstructions is an InstructionSource backed by a map from source
// name to instructions.
type SourceInstructions map[string]string

// SourceInstructions implements InstructionSource.
func (m SourceInstructions) SourceInstructions(source string) (string, bool) {
	s, ok := m[source]
	return s, ok
}

var _ InstructionSource = SourceInstructions(nil)

// Builder builds the prompts agentq sends: agent messages for each
// strategy, tool-output ratings, rubric judgements and summaries. It holds
// only the tier-1 text and the source of tier-2 instructions, never changes
// after NewBuilder, and is safe for concurrent use. Its output is
// deterministic: the same input always gives the same messages.
type Builder struct {
	general string
	sources InstructionSource

	// ratingSystem memoises rating system prompts, which the rater would
	// otherwise rebuild identically for every tool call; see
	// Builder.ratingSystem.
	ratingSystem sync.Map // ratingKey -> string
	ratingCached atomic.Int32
}

// BuilderOption configures a Builder.
type BuilderOption func(*Builder)

// WithGeneralInstructions replaces DefaultGeneralInstructions as the tier-1
// text of agent prompts; an empty text leaves tier 1 out.
func WithGeneralInstructions(text string) BuilderOption {
	return func(b *Builder) { b.general = text }
}

// WithSources sets where tier-2 instructions come from. Without it, prompts
// have no tier 2.
func WithSources(s InstructionSource) BuilderOption {
	return func(b *Builder) { b.sources = s }
}

// NewBuilder returns a Builder with DefaultGeneralInstructions and no
// per-source instructions unless opts say otherwise.
func NewBuilder(opts ...BuilderOption) *Builder {
	b := &Builder{general: DefaultGeneralInstructions}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Instructions selects the tier-2 and tier-3 instructions of one prompt.
type Instructions struct {
	// Sources are the tool servers or namespaces whose instructions apply,
	// in the order they should appear. Unknown sources and repeats are
	// skipped.
	Sources []string
	// Custom is the tier-3 text, for example an agent's own instructions.
	Custom string
}

// Compose returns the three tiers of instructions as headed sections, in
// order: general (the Builder's tier-1 text), one section per source that
// has instructions, and custom. Empty tiers are left out.
func (b *Builder) Compose(in Instructions) string {
	var s strings.Builder
	b.compose(&s, "General Instructions", b.general, in)
	return s.String()
}

// compose writes the tiers to s, with tier 1 titled title.
func (b *Builder) compose(s *strings.Builder, title, general string, in Instructions) {
	writeTiers(s, title, general, b.resolve(in.Sources), in.Custom)
}

// sourceText is one source's tier-2 instructions.
type sourceText struct{ name, text string }

// resolve looks up the instructions of sources, in order, skipping unknown
// sources and repeats.
func (b *Builder) resolve(sources []string) []sourceText {
	if b.sources == nil || len(sources) == 0 {
		return nil
	}
	out := make([]sourceText, 0, len(sources))
	for i, src := range sources {
		if slices.Contains(sources[:i], src) {
			continue
		}
		if text, ok := b.sources.SourceInstructions(src); ok {
			out = append(out, sourceText{src, text})
		}
	}
	return out
}

// writeTiers writes the three tiers as headed sections, leaving out empty
// ones.
func writeTiers(s *strings.Builder, title, general string, tier2 []sourceText, custom string) {
	section := func(heading, text string) {
		text = strings.TrimSpace(text)
		if text == "" {
			return
		}
		sep(s)
		s.WriteString("## ")
		s.WriteString(heading)
		s.WriteString("\n\n")
		s.WriteString(text)
	}
	section(title, general)
	for _, st := range tier2 {
		section(oneLine(st.name)+" Instructions", st.text)
	}
	section("Custom Instructions", custom)
}

// Strategy is how an agent works towards an answer.
type Strategy string

// The strategies the Builder has prompts for.
const (
	// StrategyReAct describes tools in the prompt text and parses
	// Thought/Action/Final Answer from the model's reply.
	StrategyReAct Strategy = "react"
	// StrategyNative passes tools through the API's native tool calling;
	// the prompt text does not mention them.
	StrategyNative Strategy = "native"
	// StrategySynthesis combines several agents' results without tools.
	StrategySynthesis Strategy = "synthesis"
)

// Task is what an agent is asked to do.
type Task struct {
	Instructions
	// Query is the user's query; required. It is fenced as untrusted.
	Query string
	// Background is optional material the agent should use, such as
	// earlier findings; it is fenced as untrusted.
	Background string
}

// Result is one agent's answer, as synthesis combines them.
type Result struct {
	// Agent names who produced the result.
	Agent string
	// Content is the result itself; it is fenced as untrusted.
	Content string
}

func (t Task) validate() error {
	if strings.TrimSpace(t.Query) == "" {
		return fmt.Errorf("%w: task has no query", ErrInvalid)
	}
	return nil
}

// ReActMessages returns the system and user messages that start a ReAct
// agent: the composed instructions with the ReAct format rules, then the
// tool list, the query and the task.
func (b *Builder) ReActMessages(t Task, tools []Tool) ([]Message, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var sys strings.Builder
	b.compose(&sys, "General Instructions", b.general, t.Instructions)
	sep(&sys)
	sys.WriteString(reactFormatInstructions)
	writeUntrusted(&sys)
	sep(&sys)
	sys.WriteString(agentFocus)

	var user strings.Builder
	user.WriteString("## Available Tools\n\n")
	user.WriteString(FormatTools(tools))
	user.WriteString("\n\n")
	writeTask(&user, t)
	user.WriteString("\n\n## Your Task\n\n")
	user.WriteString(agentTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}

// NativeMessages returns the system and user messages that start an agent
// using native tool calling. The tools go to the API as tool definitions, so
// the text never lists them.
func (b *Builder) NativeMessages(t Task) ([]Message, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var sys strings.Builder
	b.compose(&sys, "General Instructions", b.general, t.Instructions)
	writeUntrusted(&sys)
	sep(&sys)
	sys.WriteString(agentFocus)

	var user strings.Builder
	writeTask(&user, t)
	user.WriteString("\n\n## Your Task\n\n")
	user.WriteString(agentTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}

// SynthesisMessages returns the system and user messages of a tool-less
// call that combines several agents' results for the same task.
func (b *Builder) SynthesisMessages(t Task, results []Result) ([]Message, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("%w: synthesis needs at least one result", ErrInvalid)
	}
	var sys strings.Builder
	b.compose(&sys, "General Instructions", b.general, t.Instructions)
	sep(&sys)
	sys.WriteString(synthesisInstructions)
	writeUntrusted(&sys)

	var user strings.Builder
	writeTask(&user, t)
	for i, r := range results {
		fmt.Fprintf(&user, "\n\n## Result %d", i+1)
		if a := inline(r.Agent); a != "" {
			user.WriteString(" from ")
			user.WriteString(a)
		}
		user.WriteString("\n\n")
		writeFence(&user, FenceAgentResult, r.Content)
	}
	user.WriteString("\n\n## Your Task\n\n")
	user.WriteString(synthesisTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}

// ForcedConclusion returns the user message that makes an agent answer when
// it reaches its iteration limit. ReAct agents are told to keep the ReAct
// format so their answer still parses; other strategies to answer plainly.
func (b *Builder) ForcedConclusion(s Strategy, iterations int) Message {
	format := plainConclusionFormat
	if s == StrategyReAct {
		format = reactConclusionFormat
	}
	return User(fmt.Sprintf(forcedConclusionText, iterations) + "\n\n" + format)
}

// writeTask writes the fenced query and background.
func writeTask(s *strings.Builder, t Task) {
	s.WriteString("## Query\n\n")
	writeFence(s, FenceUserQuery, t.Query)
	if strings.TrimSpace(t.Background) != "" {
		s.WriteString("\n\n## Background\n\n")
		writeFence(s, FenceBackground, t.Background)
	}
}

// writeUntrusted writes the section explaining fences.
func writeUntrusted(s *strings.Builder) {
	sep(s)
	s.WriteString("## Untrusted Data\n\n")
	s.WriteString(untrustedNotice)
}

// sep separates the next section from what s already holds.
func sep(s *strings.Builder) {
	if s.Len() > 0 {
		s.WriteString("\n\n")
	}
}
