package chat

import (
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAIRequest is the body of a chat-completions request, limited to the
// fields a Conversation knows. agentq's LLM client adds tools, response
// format and streaming options itself.
type OpenAIRequest struct {
	Model       string          `json:"model"`
	Messages    []OpenAIMessage `json:"messages"`
	Temperature *float64        `json:"temperature,omitempty"`
	// MaxCompletionTokens is OpenAI's current name for the ceiling on
	// generated tokens; max_tokens is deprecated and rejected by o-series
	// models.
	MaxCompletionTokens int `json:"max_completion_tokens,omitempty"`
}

// OpenAIMessage is one message in the chat-completions shape. Content is
// sent as a string unless Parts is set, and left out for an assistant
// message that only calls tools.
type OpenAIMessage struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string
	// Content is the message text.
	Content string
	// Parts replaces Content for multi-part user messages (media).
	Parts []OpenAIContentPart
	// Name is the optional participant name.
	Name string
	// ToolCalls are an assistant message's tool calls.
	ToolCalls []OpenAIToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string
}

// OpenAIContentPart is one part of a multi-part user message.
type OpenAIContentPart struct {
	Type     string          `json:"type"` // "text" or "image_url"
	Text     string          `json:"text,omitempty"`
	ImageURL *OpenAIImageURL `json:"image_url,omitempty"`
}

// OpenAIImageURL points at an image by URL or data: URI.
type OpenAIImageURL struct {
	URL string `json:"url"`
}

// OpenAIToolCall is a tool call in an assistant message.
type OpenAIToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"` // always "function"
	Function OpenAIFunctionCall `json:"function"`
}

// OpenAIFunctionCall names the function and carries its arguments as a JSON
// string, as the API expects.
type OpenAIFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// wireMessage is OpenAIMessage as it goes on the wire; Content is a string,
// a list of parts or absent.
type wireMessage struct {
	Role       string           `json:"role"`
	Content    any              `json:"content,omitempty"`
	Name       string           `json:"name,omitempty"`
	ToolCalls  []OpenAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

// MarshalJSON encodes m in the chat-completions shape.
func (m OpenAIMessage) MarshalJSON() ([]byte, error) {
	w := wireMessage{Role: m.Role, Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	switch {
	case m.Parts != nil:
		w.Content = m.Parts
	case m.Content != "" || len(m.ToolCalls) == 0:
		// Only a tool-calling assistant message may omit content; every
		// other message sends it, even empty.
		w.Content = m.Content
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the chat-completions shape, content as a string or
// as parts.
func (m *OpenAIMessage) UnmarshalJSON(data []byte) error {
	var w struct {
		wireMessage
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*m = OpenAIMessage{Role: w.Role, Name: w.Name, ToolCalls: w.ToolCalls, ToolCallID: w.ToolCallID}
	c := strings.TrimSpace(string(w.Content))
	switch {
	case c == "" || c == "null":
	case strings.HasPrefix(c, "["):
		if err := json.Unmarshal(w.Content, &m.Parts); err != nil {
			return fmt.Errorf("content parts: %w", err)
		}
	default:
		if err := json.Unmarshal(w.Content, &m.Content); err != nil {
			return fmt.Errorf("content: %w", err)
		}
	}
	return nil
}

// OpenAIRequest renders c as a chat-completions request body.
func (c Conversation) OpenAIRequest() OpenAIRequest {
	r := OpenAIRequest{Model: c.model, Messages: c.OpenAIMessages(), MaxCompletionTokens: c.maxTokens}
	if c.hasTemp {
		t := c.temperature
		r.Temperature = &t
	}
	return r
}

// OpenAIMessages renders the messages in the chat-completions shape. Tool
// calls join the assistant message right before them, so text followed by
// calls, or several calls in a row, travel as one assistant message with
// content and tool_calls, the way the API returned them. A summary is sent
// as an ordinary assistant message; its marker is for this package only.
func (c Conversation) OpenAIMessages() []OpenAIMessage {
	out := make([]OpenAIMessage, 0, len(c.messages))
	for _, m := range c.messages {
		switch m.kind {
		case KindToolCall:
			call := OpenAIToolCall{
				ID:       m.callID,
				Type:     "function",
				Function: OpenAIFunctionCall{Name: m.toolName, Arguments: m.args},
			}
			if n := len(out); n > 0 && out[n-1].Role == string(RoleAssistant) && out[n-1].Name == m.name {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
				continue
			}
			out = append(out, OpenAIMessage{Role: string(RoleAssistant), Name: m.name, ToolCalls: []OpenAIToolCall{call}})
		case KindToolResult:
			out = append(out, OpenAIMessage{Role: string(RoleTool), Content: m.content, ToolCallID: m.callID})
		case KindMedia:
			out = append(out, OpenAIMessage{Role: string(RoleUser), Name: m.name, Parts: mediaParts(m)})
		default:
			out = append(out, OpenAIMessage{Role: string(m.role), Content: m.content, Name: m.name})
		}
	}
	return out
}

func mediaParts(m Message) []OpenAIContentPart {
	var parts []OpenAIContentPart
	if m.content != "" {
		parts = append(parts, OpenAIContentPart{Type: "text", Text: m.content})
	}
	if strings.HasPrefix(m.mimeType, "image/") {
		return append(parts, OpenAIContentPart{Type: "image_url", ImageURL: &OpenAIImageURL{URL: m.url}})
	}
	// Chat completions take no other media by URL; tell the model where it
	// is rather than drop it.
	ref := fmt.Sprintf("[media %s at %s", m.mimeType, m.url)
	if m.size > 0 {
		ref += fmt.Sprintf(", %d bytes", m.size)
	}
	return append(parts, OpenAIContentPart{Type: "text", Text: ref + "]"})
}
