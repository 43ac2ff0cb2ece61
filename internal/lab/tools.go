package lab

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/agentq/agentq/internal/provider"
)

// maxTools bounds the tools a trial offers, as OpenAI does.
const maxTools = 128

// toolNameRE is a function name OpenAI accepts.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// checkTools reports what is wrong with tool definitions a trial would
// offer the model: each {"type": "function", "function": {"name": ...}},
// names distinct.
func checkTools(tools []json.RawMessage) error {
	if len(tools) > maxTools {
		return fmt.Errorf("%d tools, at most %d", len(tools), maxTools)
	}
	seen := map[string]bool{}
	for i, raw := range tools {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("tool %d is not an OpenAI tool definition: %w", i+1, err)
		}
		if t.Type != "function" || t.Function == nil || !toolNameRE.MatchString(t.Function.Name) {
			return fmt.Errorf(`tool %d: want {"type": "function", "function": {"name": ..., "parameters": ...}} with a name of letters, digits, _ and - (at most 64)`, i+1)
		}
		if seen[t.Function.Name] {
			return fmt.Errorf("tool %s is defined twice", t.Function.Name)
		}
		seen[t.Function.Name] = true
	}
	return nil
}

// toolCalls counts an answer's tool calls by name.
func toolCalls(calls []provider.ToolCall) map[string]int {
	if len(calls) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, c := range calls {
		out[c.Name]++
	}
	return out
}

// answerText is what the tiers judge of an answer: its text, or, when it
// only calls tools, the calls as JSON, [{"name": ..., "arguments": ...}],
// as promptfoo shows them.
func answerText(resp provider.ChatResponse) string {
	if resp.Content != "" || len(resp.ToolCalls) == 0 {
		return resp.Content
	}
	type call struct {
		Name      string `json:"name"`
		Arguments any    `json:"arguments"`
	}
	out := make([]call, len(resp.ToolCalls))
	for i, c := range resp.ToolCalls {
		out[i] = call{Name: c.Name, Arguments: c.Arguments}
		var args any
		if json.Unmarshal([]byte(c.Arguments), &args) == nil {
			out[i].Arguments = args
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}
