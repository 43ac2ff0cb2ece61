package chat

import (
	"fmt"
	"strings"
)

// ToolSummaryInput is a tool result too large to rate whole.
type ToolSummaryInput struct {
	// ToolName is the tool that was called; required.
	ToolName string
	// Source is the tool server or namespace, whose tier-2 instructions
	// apply.
	Source string
	// Query is the task the agent was working on, if known, so the summary
	// keeps what matters to it.
	Query string
	// Input is the call's arguments, usually JSON.
	Input string
	// Output is the result to summarise.
	Output string
	// TargetTokens is the size the summary should stay under; required.
	TargetTokens int
}

// ToolSummaryMessages returns the system and user messages asking a model to
// condense a tool result to about TargetTokens tokens, keeping what a rater
// needs to judge its relevance and correctness: errors, the facts the call
// asked for and what is missing. The reply is plain text, meant to be the
// Output of a RatingInput.
func (b *Builder) ToolSummaryMessages(in ToolSummaryInput) ([]Message, error) {
	name := inline(in.ToolName)
	if name == "" {
		return nil, fmt.Errorf("%w: summary input has no tool name", ErrInvalid)
	}
	if in.TargetTokens <= 0 {
		return nil, fmt.Errorf("%w: summary target %d tokens must be positive", ErrInvalid, in.TargetTokens)
	}
	var sys strings.Builder
	b.compose(&sys, "Summarization Instructions", fmt.Sprintf(toolSummaryInstructions, in.TargetTokens), Instructions{Sources: sources(in.Source)})
	writeUntrusted(&sys)

	var user strings.Builder
	user.WriteString("Summarise the output of a call to ")
	user.WriteString(name)
	user.WriteString(".")
	if strings.TrimSpace(in.Query) != "" {
		user.WriteString("\n\n## Agent's Task\n\n")
		writeFence(&user, FenceUserQuery, in.Query)
	}
	user.WriteString("\n\n## Input\n\n")
	writeFence(&user, FenceToolInput, in.Input)
	user.WriteString("\n\n## Output\n\n")
	writeFence(&user, FenceToolOutput, in.Output)
	fmt.Fprintf(&user, "\n\nReply with the summary only, under %d tokens.", in.TargetTokens)
	return []Message{System(sys.String()), User(user.String())}, nil
}

// ExecutiveSummaryMessages returns the system and user messages asking a
// model for a one-to-four-line summary of an experiment report, stating only
// what the report states. The report is any text: the lab's rendering of
// its comparison report, in Markdown or JSON.
func (b *Builder) ExecutiveSummaryMessages(report string) ([]Message, error) {
	if strings.TrimSpace(report) == "" {
		return nil, fmt.Errorf("%w: empty experiment report", ErrInvalid)
	}
	var sys strings.Builder
	b.compose(&sys, "Summary Instructions", executiveSummaryInstructions, Instructions{})
	writeUntrusted(&sys)

	var user strings.Builder
	user.WriteString("## Experiment Report\n\n")
	writeFence(&user, FenceExperimentReport, report)
	user.WriteString("\n\n## Your Task\n\n")
	user.WriteString(executiveSummaryTaskText)
	return []Message{System(sys.String()), User(user.String())}, nil
}
