package chat_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

// sample is a conversation with every kind of message.
func sample(t *testing.T) chat.Conversation {
	t.Helper()
	callA, err := chat.ToolCall("search.query", map[string]any{"q": "login timeout"}, map[string]any{"type": "object"})
	require.NoError(t, err)
	callB, err := chat.ToolCall("clock.now", nil, nil)
	require.NoError(t, err)
	greeting, err := chat.Template(chat.RoleUser, "Which release fixed {{.bug}}?", map[string]any{"bug": "the login timeout"})
	require.NoError(t, err)
	return chat.New("gpt-4o").
		WithTemperature(0.2).
		WithMaxTokens(512).
		Append(
			chat.System("You answer questions about releases."),
			greeting.WithName("ada"),
			callA,
			callB,
			chat.ToolResult(callA.CallID(), `{"hits":["v1.5: fix login timeout"]}`),
			chat.ToolResult(callB.CallID(), "2025-06-21T10:00:00Z"),
			chat.Assistant("v1.5 fixed it."),
			chat.Media("image/png", "https://example.com/screenshot.png", 20480).WithCaption("Is this the same bug?"),
			chat.Media("application/pdf", "https://example.com/report.pdf", 0),
			chat.Summary("Earlier: the user asked about v1.4."),
		)
}

func TestConversation_OpenAI(t *testing.T) {
	c := sample(t)
	data, err := json.MarshalIndent(c.OpenAIRequest(), "", "  ")
	require.NoError(t, err)
	golden(t, "openai-request", string(data)+"\n")

	// Two consecutive calls travel as one assistant message.
	msgs := c.OpenAIMessages()
	require.Len(t, msgs, c.Len()-1)
	require.Len(t, msgs[2].ToolCalls, 2)

	// The wire shape decodes back to the same messages.
	var back []chat.OpenAIMessage
	wire, err := json.Marshal(msgs)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(wire, &back))
	require.Equal(t, msgs, back)
}

func TestConversation_OpenAIToolCallsJoinAssistantText(t *testing.T) {
	call, err := chat.ToolCall("clock.now", nil, nil)
	require.NoError(t, err)
	c := chat.New("gpt-4o").Append(chat.User("time?"), chat.Assistant("Let me check."), call, chat.ToolResult(call.CallID(), "10:00"))
	msgs := c.OpenAIMessages()
	require.Len(t, msgs, 3)
	require.Equal(t, "Let me check.", msgs[1].Content)
	require.Len(t, msgs[1].ToolCalls, 1)
	data, err := json.Marshal(msgs[1])
	require.NoError(t, err)
	require.JSONEq(t, `{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"`+call.CallID()+`","type":"function","function":{"name":"clock.now","arguments":"{}"}}]}`, string(data))
}

func TestOpenAIMessage_Content(t *testing.T) {
	tests := []struct {
		name string
		msg  chat.OpenAIMessage
		want string
	}{
		{"empty user content is sent", chat.OpenAIMessage{Role: "user"}, `{"role":"user","content":""}`},
		{"tool-calling assistant omits content", chat.OpenAIMessage{Role: "assistant", ToolCalls: []chat.OpenAIToolCall{{ID: "1", Type: "function", Function: chat.OpenAIFunctionCall{Name: "f", Arguments: "{}"}}}},
			`{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{"parts", chat.OpenAIMessage{Role: "user", Parts: []chat.OpenAIContentPart{{Type: "text", Text: "hi"}}}, `{"role":"user","content":[{"type":"text","text":"hi"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.msg)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(got))
		})
	}
	var m chat.OpenAIMessage
	require.NoError(t, json.Unmarshal([]byte(`{"role":"assistant","content":null}`), &m))
	require.Equal(t, chat.OpenAIMessage{Role: "assistant"}, m)
	require.Error(t, json.Unmarshal([]byte(`{"role":"user","content":7}`), &m))
}

func TestConversation_Text(t *testing.T) {
	golden(t, "conversation-text", sample(t).Text()+"\n")
}

func TestConversation_Immutable(t *testing.T) {
	base := chat.New("gpt-4o").Append(chat.System("sys"), chat.User("one"))
	a := base.Append(chat.Assistant("a"))
	b := base.Append(chat.Assistant("b"))
	require.Equal(t, 2, base.Len(), "deriving leaves the original alone")
	require.Equal(t, "a", a.Messages()[2].Content())
	require.Equal(t, "b", b.Messages()[2].Content(), "siblings never share a backing array")

	msgs := base.Messages()
	msgs[0] = chat.User("changed")
	require.Equal(t, "sys", base.Messages()[0].Content(), "Messages returns a copy")

	before := base.TokenCount()
	withModel := base.WithModel("gpt-4").WithTemperature(1).WithMaxTokens(9).WithCounter(chat.ApproxCounter{})
	require.Equal(t, "gpt-4o", base.Model())
	_, hasTemp := base.Temperature()
	require.False(t, hasTemp)
	require.Zero(t, base.MaxTokens())
	require.Equal(t, before, base.TokenCount())
	temp, _ := withModel.Temperature()
	require.Equal(t, 1.0, temp)
	require.Equal(t, 9, withModel.MaxTokens())
	require.Equal(t, "gpt-4", withModel.Model())

	require.Equal(t, 2, base.Append(chat.Message{}).Len(), "zero messages are skipped")
}

func TestConversation_ZeroValue(t *testing.T) {
	var c chat.Conversation
	require.Zero(t, c.TokenCount())
	require.Equal(t, `chat.Conversation{model="" msgs=0 tokens≈0}`, c.String())
	c = c.Append(chat.User("hello world")).WithCounter(chat.ApproxCounter{})
	require.Equal(t, 3+3+2, c.TokenCount())
}

func TestConversation_String(t *testing.T) {
	c := chat.New("gpt-4o").WithTemperature(0).WithMaxTokens(256).
		Append(chat.System("secret system prompt"), chat.User("secret user data"))
	s := c.String()
	require.Equal(t, `chat.Conversation{model="gpt-4o" msgs=2 tokens≈15 temp=0 max=256}`, s)
	require.NotContains(t, s, "secret")
}

func TestConversation_Validate(t *testing.T) {
	tests := []struct {
		name    string
		c       chat.Conversation
		wantErr string
	}{
		{"ok", chat.New("gpt-4o").WithTemperature(2).Append(chat.User("x")), ""},
		{"empty", chat.New(""), "no model; no messages"},
		{"temperature", chat.New("m").WithTemperature(2.5).Append(chat.User("x")), "temperature 2.5 outside [0, 2]"},
		{"max tokens", chat.New("m").WithMaxTokens(-1).Append(chat.User("x")), "max tokens -1 is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, chat.ErrInvalid)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestMessageAccessors(t *testing.T) {
	m := chat.Media("image/jpeg", "https://x/y.jpg", 10)
	require.Equal(t, "image/jpeg", m.MimeType())
	require.Equal(t, "https://x/y.jpg", m.URL())
	require.Equal(t, int64(10), m.Size())
	require.Equal(t, chat.RoleUser, m.Role())
	require.Equal(t, chat.KindMedia, m.Kind())

	s := chat.Summary("short")
	require.True(t, s.IsSummary())
	require.Equal(t, chat.RoleAssistant, s.Role())
	_, fromTemplate := s.TemplateSource()
	require.False(t, fromTemplate)

	r := chat.ToolResult("call_1", "out")
	require.Equal(t, chat.RoleTool, r.Role())
	require.Equal(t, "call_1", r.CallID())
	require.Equal(t, "bob", chat.User("x").WithName("bob").Name())
}
