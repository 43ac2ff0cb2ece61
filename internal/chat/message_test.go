package chat_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/chat"
)

func TestTemplate(t *testing.T) {
	tests := []struct {
		name   string
		src    string
		params map[string]any
		want   string
	}{
		{"plain text", "Rate the output.", nil, "Rate the output."},
		{"fields", "Rate {{.tool}} for {{.task}}.", map[string]any{"tool": "search", "task": "triage"}, "Rate search for triage."},
		{"nested", "{{.tool.name}}", map[string]any{"tool": map[string]any{"name": "clock"}}, "clock"},
		{"range counts names inside", "{{range .items}}{{.}};{{end}}", map[string]any{"items": []string{"a", "b"}}, "a;b;"},
		{"if and else", "{{if .ok}}yes{{else}}{{.why}}{{end}}", map[string]any{"ok": false, "why": "no"}, "no"},
		{"root variable", "{{with .a}}{{$.b}}{{end}}", map[string]any{"a": 1, "b": "B"}, "B"},
		{"whole dot disables unknown check", "{{index . \"a\"}}", map[string]any{"a": "x", "unused": 1}, "x"},
		{"zero values are not missing", "[{{.n}}|{{.s}}]", map[string]any{"n": 0, "s": ""}, "[0|]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := chat.Template(chat.RoleUser, tt.src, tt.params)
			require.NoError(t, err)
			require.Equal(t, tt.want, m.Content())
			src, ok := m.TemplateSource()
			require.True(t, ok)
			require.Equal(t, tt.src, src)
			require.Equal(t, chat.RoleUser, m.Role())
		})
	}
}

func TestTemplate_Errors(t *testing.T) {
	tests := []struct {
		name   string
		role   chat.Role
		src    string
		params map[string]any
		want   []error
	}{
		{"unknown reported before missing", chat.RoleSystem, "Hello {{.name}}", map[string]any{"other": 1, "name2": 2}, []error{chat.ErrTemplate, chat.ErrUnknownParam}},
		{"missing with no params", chat.RoleSystem, "Hello {{.name}}", nil, []error{chat.ErrTemplate, chat.ErrMissingParam}},
		{"missing nested key", chat.RoleUser, "{{.tool.name}}", map[string]any{"tool": map[string]any{}}, []error{chat.ErrTemplate, chat.ErrMissingParam}},
		{"missing inside if", chat.RoleUser, "{{if .a}}{{.b}}{{end}}", map[string]any{"a": true}, []error{chat.ErrTemplate, chat.ErrMissingParam}},
		{"unknown param", chat.RoleUser, "Hi {{.name}}", map[string]any{"name": "x", "nmae": "y"}, []error{chat.ErrTemplate, chat.ErrUnknownParam}},
		{"unknown with plain text", chat.RoleUser, "Hi", map[string]any{"name": "x"}, []error{chat.ErrTemplate, chat.ErrUnknownParam}},
		{"parse error", chat.RoleUser, "{{.name", map[string]any{"name": "x"}, []error{chat.ErrTemplate}},
		{"exec error", chat.RoleUser, "{{index .l 5}}", map[string]any{"l": []int{1}}, []error{chat.ErrTemplate}},
		{"tool role", chat.RoleTool, "x", nil, []error{chat.ErrInvalid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := chat.Template(tt.role, tt.src, tt.params)
			for _, want := range tt.want {
				require.ErrorIs(t, err, want)
			}
			require.True(t, m.IsZero())
		})
	}
}

func TestToolCall(t *testing.T) {
	args := map[string]any{"q": "timeout", "limit": 3}
	schema := map[string]any{"type": "object"}
	m, err := chat.ToolCall("search.query", args, schema)
	require.NoError(t, err)
	args["q"] = "changed"
	schema["type"] = "changed"

	require.Equal(t, chat.KindToolCall, m.Kind())
	require.Equal(t, chat.RoleAssistant, m.Role())
	require.Equal(t, "search.query", m.ToolName())
	require.JSONEq(t, `{"limit":3,"q":"timeout"}`, string(m.Arguments()), "message keeps its own copy")
	require.JSONEq(t, `{"type":"object"}`, string(m.ResponseSchema()))
	require.Regexp(t, `^call_[0-9a-f]{12}$`, m.CallID())

	again, err := chat.ToolCall("search.query", map[string]any{"limit": 3, "q": "timeout"}, nil)
	require.NoError(t, err)
	require.Equal(t, m.CallID(), again.CallID(), "call ID derives from name and arguments")
	require.Nil(t, again.ResponseSchema())
	require.Equal(t, "call_abc", again.WithCallID("call_abc").CallID())

	_, err = chat.ToolCall("", nil, nil)
	require.ErrorIs(t, err, chat.ErrInvalid)
	_, err = chat.ToolCall("t", map[string]any{"c": make(chan int)}, nil)
	require.ErrorIs(t, err, chat.ErrInvalid)
	_, err = chat.ToolCall("t", nil, json.RawMessage(`{bad`))
	require.ErrorIs(t, err, chat.ErrInvalid)
}

func TestKindString(t *testing.T) {
	for k, want := range map[chat.Kind]string{
		chat.KindNone: "none", chat.KindText: "text", chat.KindToolCall: "tool_call",
		chat.KindToolResult: "tool_result", chat.KindMedia: "media",
	} {
		require.Equal(t, want, k.String())
	}
}
