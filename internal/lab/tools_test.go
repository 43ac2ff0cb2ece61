package lab_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider/providertest"
)

// toolDef is an OpenAI tool definition.
func toolDef(name string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{"name": name, "parameters": map[string]any{"type": "object"}}}
}

// versionWithTools publishes a version whose metadata offers tools.
func (w *world) versionWithTools(promptID string, version int, content string, tools ...string) {
	w.t.Helper()
	defs := make([]any, len(tools))
	for i, name := range tools {
		defs[i] = toolDef(name)
	}
	created := w.publish(bus.Type("prompt", "created"), map[string]any{
		"id": promptID, "type": "system", "name": promptID, "content": content, "version": version,
		"metadata": map[string]any{"tools": defs},
	})
	ix, err := bus.NewResult("indexer", bus.Type("prompt", "indexed"), created,
		map[string]any{"prompt_id": promptID, "version": version, "content_hash": "h", "outcome": "created"})
	require.NoError(w.t, err)
	w.publishEvent(ix)
}

// TestToolUsage: a version's metadata.tools are offered with every trial,
// the tools the answers call are counted per trial and per version in the
// report; an answer that only calls tools is judged as the calls' JSON; a
// request's tools replace the versions'; malformed tools are refused.
func TestToolUsage(t *testing.T) {
	w := newWorld(t)
	w.model.SetToolCaller(providertest.TestModelTools)
	w.start(w.cfg)
	w.versionWithTools("tools", 1, "Answer {q} yourself.", "search_docs", "open_ticket")
	w.versionWithTools("tools", 2, "Answer {q} after search_docs finds the page.", "search_docs", "open_ticket")
	w.versionWithTools("tools", 3, "TOOLS ONLY", "search_docs") // the answer only calls tools (see below)
	w.model.SetContextResponder(nil)
	w.model.SetResponder(func(req providertest.ChatRequest) string {
		kind, system, user := kindOf(req)
		switch {
		case kind == callJudge:
			return judgeAnswer(user)
		case kind == callSummary:
			return "summary"
		case system == "TOOLS ONLY":
			return ""
		}
		return system + " " + user
	})
	// Version 3's answers only call search_docs.
	w.model.SetToolCaller(func(req providertest.ChatRequest) []providertest.ToolCall {
		_, system, user := kindOf(req)
		if system == "TOOLS ONLY" {
			return []providertest.ToolCall{{Name: "search_docs", Arguments: `{"query": "` + user + `"}`}}
		}
		return providertest.TestModelTools(req)
	})
	req := w.request(map[string]any{
		"prompt_id": "tools", "experiment_id": "tools-1", "baseline_version": 1, "candidate_versions": []int{2, 3},
		"test_queries": queries(2, ""), "repetitions": 2,
		"evaluation": map[string]any{"format": "text", "llm_judge": false, "summary": false},
	})
	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	var d struct {
		Report struct {
			Versions []struct {
				Version   int            `json:"version"`
				ToolUsage map[string]int `json:"tool_usage"`
			} `json:"versions"`
		} `json:"report"`
	}
	require.NoError(t, json.Unmarshal(end.Data(), &d))
	usage := map[int]map[string]int{}
	for _, v := range d.Report.Versions {
		usage[v.Version] = v.ToolUsage
	}
	require.Equal(t, map[int]map[string]int{1: nil, 2: {"search_docs": 4}, 3: {"search_docs": 4}}, usage)

	trials, err := lab.Trials(t.Context(), w.pool, "lab", w.tenant, "tools-1")
	require.NoError(t, err)
	require.Len(t, trials, 12)
	for _, tr := range trials {
		switch tr.Version {
		case 1:
			require.Nil(t, tr.ToolCalls)
			require.Equal(t, "Answer {q} yourself. q"+string(rune('0'+tr.Query)), tr.Response)
		case 2:
			require.Equal(t, map[string]int{"search_docs": 1}, tr.ToolCalls)
		case 3:
			require.Equal(t, map[string]int{"search_docs": 1}, tr.ToolCalls)
			require.JSONEq(t, `[{"name": "search_docs", "arguments": {"query": "q`+string(rune('0'+tr.Query))+`"}}]`, tr.Response,
				"an answer that only calls tools is judged as its calls")
			require.True(t, tr.Pass)
		}
	}

	// The request's tools replace the versions': version 2 names
	// search_docs, which is no longer offered.
	req = w.request(map[string]any{
		"prompt_id": "tools", "experiment_id": "tools-2", "baseline_version": 1, "candidate_versions": []int{2},
		"test_queries": queries(1, ""), "tools": []any{toolDef("open_ticket")},
		"evaluation": map[string]any{"format": "text", "llm_judge": false, "summary": false},
	})
	end = w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d.Report.Versions = nil
	require.NoError(t, json.Unmarshal(end.Data(), &d))
	require.Len(t, d.Report.Versions, 2)
	for _, v := range d.Report.Versions {
		require.Nil(t, v.ToolUsage, "version %d", v.Version)
	}

	req = w.request(map[string]any{
		"prompt_id": "tools", "experiment_id": "tools-3", "test_queries": queries(1, ""),
		"tools": []any{toolDef("open_ticket"), toolDef("open_ticket")},
	})
	var rej rejection
	require.NoError(t, json.Unmarshal(w.result(lab.TypeRejected, req, 30*time.Second).Data(), &rej))
	require.Equal(t, lab.ReasonInvalid, rej.ReasonCode)
	require.Equal(t, "tools: tool open_ticket is defined twice", rej.Reason)
}
