package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/agentq/agentq/internal/chat"
)

// maxChatBody bounds a chat completion's body; a rating is a few hundred
// bytes, a lab answer a few pages.
const maxChatBody = 8 << 20

// Chat calls an OpenAI-compatible /chat/completions endpoint. It is safe
// for concurrent use; one per model and endpoint is enough for a process.
type Chat struct {
	c     *client
	model string
	// noFormat is set once the server rejected response_format: from then
	// on JSON mode relies on the prompt and tolerant parsing alone.
	noFormat atomic.Bool
}

// NewChat checks opts and returns a chat client. It does not contact the
// server.
func NewChat(opts Options) (*Chat, error) {
	c, err := newClient(opts, "/chat/completions", DefaultChatTimeout, maxChatBody)
	if err != nil {
		return nil, err
	}
	return &Chat{c: c, model: strings.TrimSpace(opts.Model)}, nil
}

// Model returns the model requests go to unless they name another.
func (c *Chat) Model() string { return c.model }

// ChatRequest is one chat completion to make. Its messages, temperature
// and token ceiling are a chat.Conversation rendered with OpenAIRequest,
// so prompts are built (and fenced) in package chat and sent as they are:
//
//	conv := chat.New(model).WithTemperature(0).Append(msgs...)
//	resp, err := llm.Complete(ctx, provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), JSON: true})
type ChatRequest struct {
	// OpenAIRequest holds model (empty: the client's model), messages,
	// temperature (nil: the server's default; 0 is sent as 0) and
	// max_completion_tokens (0: none).
	chat.OpenAIRequest
	// JSON asks for a JSON object: response_format {"type": "json_object"},
	// and the content must hold a JSON object (see ChatResponse.JSON). The
	// prompt must ask for JSON too; OpenAI rejects json_object otherwise.
	JSON bool
	// Schema, if set, asks for a JSON object matching it (response_format
	// json_schema, structured outputs where the server has them) and
	// implies JSON. The answer is not validated against it here: parse it
	// with the caller's own checks (chat.ParseRating does).
	Schema *Schema
	// Tools are OpenAI tool definitions ({"type": "function", "function":
	// {name, description, parameters}}) the model may call; the calls come
	// back in ChatResponse.ToolCalls. Nil offers none.
	Tools []json.RawMessage
}

// ToolCall is a tool the model asked to call in its answer.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text, as the model wrote it
}

// Schema is a JSON Schema for structured output.
type Schema struct {
	// Name identifies the schema to the server: letters, digits, _ and -,
	// at most 64. Required.
	Name string
	// Description tells the model what the object is for; optional.
	Description string
	// Schema is the JSON Schema object. Required.
	Schema json.RawMessage
	// Strict asks the server to enforce the schema exactly; OpenAI then
	// requires every property to be required and additionalProperties
	// false.
	Strict bool
}

// ChatResponse is a completed chat call.
type ChatResponse struct {
	// Content is the assistant message's text, as the model wrote it.
	Content string
	// JSON is, in JSON mode, the JSON object found in Content: all of it
	// when it is one object, else the last top-level object in it, so
	// prose around the answer and ```json fences do not matter. Nil
	// outside JSON mode.
	JSON json.RawMessage
	// Model is the model that answered, as the server names it.
	Model string
	// FinishReason is the server's finish_reason: "stop", "length" (cut at
	// the token ceiling), "content_filter", ...
	FinishReason string
	// Usage is the server's own token count; all zero when it sent none.
	Usage Usage
	// Latency is the wall time of the call: rate-limit waits, every
	// attempt and backoff.
	Latency time.Duration
	// Attempts is how many HTTP requests the call sent.
	Attempts int
	// Formatted reports whether the answering request carried
	// response_format; false in JSON mode once the server has rejected it.
	Formatted bool
	// ToolCalls are the tools the answer calls, in order; an answer that
	// calls tools may have no Content.
	ToolCalls []ToolCall
}

// Usage counts tokens as the server reported them.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
}

// wireChat is the request body: the conversation's fields plus what the
// client adds. go-openai's ChatCompletionRequest is not used because its
// temperature is a float32 with omitempty, so a temperature of 0 would
// never be sent (sashabaranov/go-openai#9); chat.OpenAIRequest has a
// pointer.
type wireChat struct {
	chat.OpenAIRequest
	ResponseFormat *openai.ChatCompletionResponseFormat `json:"response_format,omitempty"`
	Tools          []json.RawMessage                    `json:"tools,omitempty"`
}

// Complete sends req and returns the model's answer. The call ends within
// the client's Timeout, whatever the server does.
//
// Errors: ErrUnavailable (also bus.Unavailable) when the server is down,
// overloaded or too slow; ErrRejected when it refuses the request;
// ErrBadOutput when the answer is unusable, in which case the response
// still carries what the server sent (content, usage, attempts) so its
// tokens can be counted. A cancelled ctx returns ctx's error. A server that
// rejects response_format with a 400 is asked once more without it, and
// never again with it for the life of the Chat.
func (c *Chat) Complete(ctx context.Context, req ChatRequest) (ChatResponse, error) {
	start := time.Now()
	wire := wireChat{OpenAIRequest: req.OpenAIRequest, Tools: req.Tools}
	if wire.Model == "" {
		wire.Model = c.model
	}
	format, err := responseFormat(req)
	if err != nil {
		return ChatResponse{}, c.wrap(wire.Model, rejected(err))
	}
	callCtx, cancel := context.WithTimeout(ctx, c.c.timeout)
	defer cancel()
	k := &call{c: c.c}
	for {
		wire.ResponseFormat = nil
		if format != nil && !c.noFormat.Load() {
			wire.ResponseFormat = format
		}
		body, err := json.Marshal(wire)
		if err != nil {
			return ChatResponse{}, c.wrap(wire.Model, rejected(fmt.Errorf("encode request: %w", err)))
		}
		data, err := c.c.post(callCtx, k, body)
		if err != nil && wire.ResponseFormat != nil && rejectsResponseFormat(err) {
			c.noFormat.Store(true)
			continue
		}
		resp := ChatResponse{Attempts: k.attempts, Formatted: wire.ResponseFormat != nil}
		if err == nil {
			err = resp.decode(data, format != nil)
		}
		resp.Latency = time.Since(start)
		if err != nil {
			return resp, c.wrap(wire.Model, c.c.fail(ctx, callCtx, err))
		}
		return resp, nil
	}
}

func (c *Chat) wrap(model string, err error) error {
	return fmt.Errorf("chat completion with %s at %s: %w", model, c.c.name, err)
}

// responseFormat is the response_format req asks for, nil for none.
func responseFormat(req ChatRequest) (*openai.ChatCompletionResponseFormat, error) {
	if s := req.Schema; s != nil {
		if strings.TrimSpace(s.Name) == "" {
			return nil, errors.New("schema has no name")
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(s.Schema, &obj); err != nil {
			return nil, fmt.Errorf("schema %s is not a JSON object: %w", s.Name, err)
		}
		return &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: s.Name, Description: s.Description, Schema: s.Schema, Strict: s.Strict,
			},
		}, nil
	}
	if req.JSON {
		return &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}, nil
	}
	return nil, nil
}

// rejectsResponseFormat reports whether err is a server refusing
// response_format (older llama.cpp, some vLLM models, some proxies): a 400,
// or a 422 from validating frameworks, that names it.
func rejectsResponseFormat(err error) bool {
	var api *APIError
	if !errors.As(err, &api) || (api.StatusCode != 400 && api.StatusCode != 422) {
		return false
	}
	msg := strings.ToLower(api.Message + " " + api.Param)
	// OpenAI refuses json_object when no message mentions JSON; that is
	// the prompt's fault, not a server without response_format.
	return strings.Contains(msg, "response_format") && !strings.Contains(msg, "must contain the word")
}

// decode fills r from a chat completion body.
func (r *ChatResponse) decode(data []byte, jsonMode bool) error {
	var wire openai.ChatCompletionResponse
	if err := json.Unmarshal(data, &wire); err != nil {
		return badOutput("answer is not a chat completion (%v): %s", err, snippet(data))
	}
	r.Model = wire.Model
	r.Usage = Usage{
		PromptTokens:     wire.Usage.PromptTokens,
		CompletionTokens: wire.Usage.CompletionTokens,
		TotalTokens:      wire.Usage.TotalTokens,
	}
	if r.Usage.TotalTokens == 0 {
		r.Usage.TotalTokens = r.Usage.PromptTokens + r.Usage.CompletionTokens
	}
	if len(wire.Choices) == 0 {
		return badOutput("answer has no choices")
	}
	choice := wire.Choices[0]
	r.Content = choice.Message.Content
	r.FinishReason = string(choice.FinishReason)
	for _, tc := range choice.Message.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if choice.Message.Refusal != "" {
		return badOutput("model refused: %s", choice.Message.Refusal)
	}
	if strings.TrimSpace(r.Content) == "" && (len(r.ToolCalls) == 0 || jsonMode) {
		return badOutput("answer is empty (finish_reason %q)", r.FinishReason)
	}
	if !jsonMode {
		return nil
	}
	obj, ok := findJSON(r.Content)
	if !ok {
		if r.FinishReason == string(openai.FinishReasonLength) {
			return badOutput("no JSON object in the answer, which was cut at the token ceiling: %s", snippet([]byte(r.Content)))
		}
		return badOutput("no JSON object in the answer: %s", snippet([]byte(r.Content)))
	}
	r.JSON = obj
	return nil
}

// maxCandidates bounds how many '{' findJSON tries, so an answer full of
// braces cannot make it quadratic.
const maxCandidates = 64

// findJSON returns the JSON object in content: the whole content if it is
// one, else the last top-level object that decodes. Models wrap JSON in
// prose or ```json fences and think aloud before answering; the answer is
// what they write last. Scanning forward and skipping over each object
// found keeps an object nested in the answer from being taken for it.
func findJSON(content string) (json.RawMessage, bool) {
	s := strings.TrimSpace(content)
	if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
		return json.RawMessage(s), true
	}
	var last json.RawMessage
	for i, tried := 0, 0; tried < maxCandidates; tried++ {
		j := strings.IndexByte(s[i:], '{')
		if j < 0 {
			break
		}
		start := i + j
		dec := json.NewDecoder(strings.NewReader(s[start:]))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == nil {
			last = raw
			i = start + int(dec.InputOffset())
			continue
		}
		i = start + 1
	}
	return last, last != nil
}
