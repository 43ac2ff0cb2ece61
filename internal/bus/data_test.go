package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
)

// DecodeData reads each field under its exact name only: what a consumer
// reads is what the schema checked.
func TestDecodeDataReadsExactNames(t *testing.T) {
	type target struct {
		ToolName string `json:"tool_name"`
	}
	type data struct {
		target
		LatencyMs *float64        `json:"latency_ms"`
		Success   *bool           `json:"success"`
		Extra     json.RawMessage `json:"extra"`
		Tags      []string        `json:"tags"`
	}
	tests := []struct {
		name    string
		in      string
		want    data
		wantErr string
	}{
		{name: "plain", in: `{"tool_name":"search","latency_ms":12.5,"success":true,"tags":["a"]}`,
			want: data{target: target{ToolName: "search"}, LatencyMs: ptr(12.5), Success: ptr(true), Tags: []string{"a"}}},
		{name: "a case variant does not shadow the checked name", in: `{"tool_name":"search","TOOL_NAME":"evil"}`,
			want: data{target: target{ToolName: "search"}}},
		{name: "a case variant alone is not read", in: `{"tool_name":"search","LATENCY_MS":-5,"Success":false}`,
			want: data{target: target{ToolName: "search"}}},
		{name: "raw JSON kept as given", in: `{"tool_name":"t","extra":{"A":[1,2]}}`,
			want: data{target: target{ToolName: "t"}, Extra: json.RawMessage(`{"A":[1,2]}`)}},
		{name: "null leaves a pointer nil", in: `{"tool_name":"t","latency_ms":null}`,
			want: data{target: target{ToolName: "t"}}},
		{name: "a name twice", in: `{"tool_name":"a","tool_name":"b"}`, wantErr: "duplicate"},
		{name: "a name twice, nested", in: `{"tool_name":"a","extra":{"x":1,"x":2}}`, wantErr: "duplicate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got data
			err := bus.DecodeData([]byte(tc.in), &got)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func ptr[T any](v T) *T { return &v }
