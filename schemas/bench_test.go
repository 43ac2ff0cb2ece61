package schemas

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// inputTypes are the types consumers validate on every event they read:
// the inputs, and the results other consumers read back.
var inputTypes = []string{
	"tool.executed.v1", "prompt.used.v1", "feedback.submitted.v1",
	"tool.registered.v1", "prompt.created.v1", "experiment.requested.v1",
	"tool.rated.v1", "prompt.rated.v1", "quality.changed.v1",
}

// benchCase is one event's data to validate in a benchmark.
type benchCase struct {
	name string // sub-benchmark name
	typ  string // CloudEvents type
	data []byte
}

// benchCases returns the valid fixtures of inputTypes, plus events of the
// size agents typically send: a tool output excerpt of 2 KiB and a
// prompt's input and output, with the escapes real text carries.
func benchCases(tb testing.TB) []benchCase {
	tb.Helper()
	var out []benchCase
	for _, name := range inputTypes {
		files, err := filepath.Glob(filepath.Join("testdata", name+".valid*.json"))
		require.NoError(tb, err)
		require.NotEmpty(tb, files, name)
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(tb, err)
			out = append(out, benchCase{strings.TrimSuffix(filepath.Base(f), ".json"), typePrefix + name, data})
		}
	}
	text := strings.Repeat("Line of tool output with \"quotes\", a tab\tand é ü → unicode.\n", 32)
	typical := func(name, typ string, v map[string]any) {
		data, err := json.Marshal(v)
		require.NoError(tb, err)
		out = append(out, benchCase{name, typePrefix + typ, data})
	}
	typical("tool.executed.v1.typical-2k", "tool.executed.v1", map[string]any{
		"tool_name": "github:search_issues", "success": true, "run_id": "0193a4c2-7b1e-7c3d-9f00-5a2b8c1d4e6f",
		"step_idx": 4, "latency_ms": 1834, "input": map[string]any{"query": "label:bug state:open", "limit": 20, "repo": "agentq/agentq"},
		"output": text[:2048], "output_truncated": true, "llm_rating": 0.7,
	})
	typical("prompt.used.v1.typical-3k", "prompt.used.v1", map[string]any{
		"prompt_hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "prompt_id": "support-answer",
		"version": 3, "success": true, "run_id": "0193a4c2-7b1e-7c3d-9f00-5a2b8c1d4e6f", "step_idx": 1, "latency_ms": 2210,
		"llm_rating": 0.85, "input": text[:1024], "output": text[:2048],
	})
	return out
}

// BenchmarkValidate validates each case with Registry.Validate.
func BenchmarkValidate(b *testing.B) {
	r := loadRegistry(b)
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			require.NoError(b, r.Validate(c.typ, c.data))
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			defer reportCPU(b)()
			for b.Loop() {
				if err := r.Validate(c.typ, c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValidateLibrary validates each case with the jsonschema library
// alone, as Validate did before the fast path: the reference to compare
// BenchmarkValidate with in the same run.
func BenchmarkValidateLibrary(b *testing.B) {
	r := loadRegistry(b)
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			sch := r.schemas[c.typ].schema
			require.NoError(b, validateSlow(c.typ, sch, c.data))
			b.ReportAllocs()
			b.SetBytes(int64(len(c.data)))
			defer reportCPU(b)()
			for b.Loop() {
				if err := validateSlow(c.typ, sch, c.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU, deferred around a benchmark's loop, reports the process's CPU
// time per operation as cpu-ns/op beside the wall time of ns/op: the
// machine is shared, and the wall time counts the time other processes
// held the cores. It includes the garbage collector's work in the
// background, which an allocating validator causes.
func reportCPU(b *testing.B) func() {
	t0, ok := cpuTime()
	return func() {
		if t1, ok1 := cpuTime(); ok && ok1 && b.N > 0 {
			b.ReportMetric(float64(t1-t0)/float64(b.N), "cpu-ns/op")
		}
	}
}
