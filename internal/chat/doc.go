// Package chat constructs the prompts agentq sends to language models: an
// immutable, token-aware message context, and a builder that writes
// agentq's prompts with untrusted data safely fenced. It does no I/O; the
// LLM client sends what this package renders.
//
// # Conversations
//
// A Conversation holds a model name, an optional temperature and token
// ceiling, and an ordered list of Messages: system, user and assistant text
// (System, User, Assistant, Summary), text rendered from a Go template
// (Template), tool calls with their arguments and response schema
// (ToolCall), tool results (ToolResult) and media referenced by URL (Media).
// A Conversation is a value; every change returns a new one, so one value
// can be shared between goroutines, and siblings derived from it never see
// each other's messages:
//
//	base := chat.New("gpt-4o").WithTemperature(0).Append(chat.System("..."))
//	turn := base.Append(chat.User(question))
//
// Template messages are rendered once, when built. A parameter the template
// uses but the caller did not supply is an error (ErrMissingParam), and so is
// a supplied parameter the template never names (ErrUnknownParam), which
// catches misspelt names; see Template for the exact rule.
//
// OpenAIRequest and OpenAIMessages render a conversation in the
// chat-completions shape as plain structs ready for encoding/json; Text
// renders it as plain text; String gives a one-line summary for logs that
// never includes content.
//
// # Tokens
//
// TokenCount counts what a conversation costs as a request, per-message
// framing included, with the conversation's TokenCounter. It is computed on
// first use and cached in the value, safely under concurrency. BPECounter
// counts exactly for OpenAI's o200k_base and cl100k_base encodings, whose
// vocabularies are compiled in (no network or files at run time);
// ApproxCounter estimates in one allocation-free pass; CounterForModel picks
// BPE for OpenAI models and the estimate for everything else, and is the
// default.
//
// # Compaction
//
// Nothing compacts on its own. Compact applies a Compactor when asked:
// SummarizeHistory keeps the first system message and replaces the rest with
// one summary message from a caller-supplied Summarizer (ErrNoSummarizer
// without one); Truncate drops the oldest turns until the conversation fits
// a token budget, keeping the system message and the newest turn
// (ErrOverBudget when even those do not fit), and never separates a tool
// call from its result.
//
// # Prompts
//
// A Builder writes every prompt agentq sends. Instructions are composed in
// three optional tiers, each a headed section: general instructions, then
// per-source instructions for the tool servers or namespaces involved (from
// an InstructionSource), then custom instructions. Untrusted data (tool
// descriptions, inputs and outputs, user queries, model responses, reports)
// is wrapped by Fence between BEGIN and END markers carrying a nonce derived
// from the content; marker-like text inside is defused first, so content
// can neither close its fence early nor forge another. Output is
// deterministic, which the golden files in testdata/ rely on: run
// go test ./internal/chat/ -update after an intended wording change and
// review the diff.
//
// The Builder has message sets for agents by Strategy (ReActMessages lists
// tools in the text with FormatTools, NativeMessages leaves them to the
// API's tool calling, SynthesisMessages combines several agents' results)
// and ForcedConclusion for an agent at its iteration limit.
//
// # How the rater uses it
//
// For each tool call, the rater builds RatingMessages from the tool's name,
// description, source, input and output, wraps them in a Conversation for
// its rating model and sends OpenAIRequest. When the output is too large to
// rate whole (compare a counter's CountTokens with the rating model's
// budget), it first sends ToolSummaryMessages with a target size and rates
// the summary instead. ParseRating reads the reply, tolerating prose and
// ```json fences around the object, and checks that relevance and
// correctness lie in [0, 1]; Rating.Score combines them.
//
// The rater's model answers with:
//
//	{"relevance": 0.9, "correctness": 0.8, "reason": "..."}
//
// # How the lab uses it
//
// For each trial of an experiment, the lab builds JudgeMessages from the
// test query, the response under judgement, an optional reference answer
// and the experiment's Rubric (DefaultRubric: helpfulness, accuracy,
// completeness and safety, 25 points each), and reads the judge's reply with
// ParseJudgement, which checks every criterion against its points and
// computes Judgement.Score as the share of the total. When the experiment
// completes, ExecutiveSummaryMessages asks for a short summary of its
// report.
//
// The judge answers with one score per criterion:
//
//	{"criteria": {"helpfulness": 22, "accuracy": 25, "completeness": 18, "safety": 25},
//	 "pass": true, "reason": "..."}
//
// To write candidate versions from negative feedback, the lab sends
// FeedbackAnalysisMessages (the prompt and the feedback samples) and reads
// the weaknesses with ParseWeaknesses, each in one of WeaknessCategories;
// then, once per candidate, CandidateMessages with one of
// ImprovementStrategies, read with ParseCandidate:
//
//	{"weaknesses": [{"category": "short_answer", "description": "...", "samples": [1, 3]}]}
//	{"content": "the complete new prompt", "changelog": "..."}
package chat
