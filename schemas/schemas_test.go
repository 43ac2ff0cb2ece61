package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureRE matches testdata file names: <name>.valid[-<case>].json and
// <name>.invalid-<case>.json, where <name> is a schema name, e.g.
// tool.executed.v1 or search.prompts.request.v1.
var fixtureRE = regexp.MustCompile(`^([a-z][a-z_]*\.[a-z][a-z_]*(?:\.request|\.response)?\.v[1-9][0-9]*)\.(valid(?:-[a-z0-9-]+)?|invalid-[a-z0-9-]+)\.json$`)

// invalidWant maps every invalid fixture to a substring its error message
// must contain: the JSON pointer of the offending value, often with the
// problem. Adding an invalid fixture without an entry fails TestFixtures.
var invalidWant = map[string]string{
	"degrader.rejected.v1.invalid-bad-event-type.json":                       "/event_type",
	"degrader.rejected.v1.invalid-missing-event-id.json":                     "/event_id: missing",
	"experiment.cancelled.v1.invalid-missing-experiment-id.json":             "/experiment_id: missing",
	"experiment.cancelled.v1.invalid-reason-not-string.json":                 "/reason: got number, want string",
	"experiment.completed.v1.invalid-bad-confidence.json":                    "/report/recommendation/confidence",
	"experiment.completed.v1.invalid-auto-unknown-weakness-category.json":    "/auto/weaknesses/0/category",
	"experiment.completed.v1.invalid-auto-split-pass-rate-out-of-range.json": "/auto/splits/held_out/versions/0/pass_rate",
	"experiment.requested.v1.invalid-auto-holdout-out-of-range.json":         "/auto/holdout",
	"experiment.completed.v1.invalid-missing-report.json":                    "/report: missing",
	"experiment.completed.v1.invalid-no-versions.json":                       "/report/versions",
	"experiment.completed.v1.invalid-pass-rate-out-of-range.json":            "/report/versions/1/pass_rate",
	"experiment.completed.v1.invalid-tier-breakdown-unknown-tier.json":       "/report/versions/0/tier_breakdown/judge: not allowed",
	"experiment.completed.v1.invalid-version-summary-missing-version.json":   "/report/versions/2/version: missing",
	"experiment.failed.v1.invalid-bad-reason-code.json":                      "/reason_code",
	"experiment.failed.v1.invalid-missing-reason.json":                       "/reason: missing",
	"experiment.completed.v1.invalid-comparison-p-out-of-range.json":         "/report/comparisons/0/pass_test/p",
	"experiment.completed.v1.invalid-per-query-unknown-field.json":           "/report/versions/0/per_query/0/extra: not allowed",
	"experiment.failed.v1.invalid-judge-negative-spend.json":                 "/judge/spent_tokens",
	"experiment.requested.v1.invalid-assertion-missing-type.json":            "/test_queries/0/assert/0/type: missing",
	"experiment.requested.v1.invalid-format.json":                            "/evaluation/format",
	"experiment.requested.v1.invalid-auto-candidate-count-out-of-range.json": "/auto/candidate_count",
	"experiment.requested.v1.invalid-auto-since-not-date-time.json":          "/auto/since",
	"experiment.requested.v1.invalid-evaluation-unknown-field.json":          "/evaluation/structual: not allowed",
	"experiment.requested.v1.invalid-missing-prompt-id.json":                 "/prompt_id: missing",
	"experiment.requested.v1.invalid-missing-test-queries.json":              "/test_queries: missing",
	"experiment.requested.v1.invalid-query-missing-text.json":                "/test_queries/0/query: missing",
	"experiment.requested.v1.invalid-repetitions-out-of-range.json":          "/repetitions",
	"experiment.started.v1.invalid-candidate-version-not-integer.json":       "/candidate_versions/0: got string, want integer",
	"experiment.started.v1.invalid-missing-baseline-version.json":            "/baseline_version: missing",
	"feedback.submitted.v1.invalid-bad-target.json":                          "/target",
	"feedback.submitted.v1.invalid-bad-thumbs.json":                          "/thumbs",
	"feedback.submitted.v1.invalid-no-rating-or-thumbs.json":                 "/rating or /thumbs: missing",
	"feedback.submitted.v1.invalid-prompt-without-reference.json":            "/prompt_hash or /prompt_id and /version: missing",
	"feedback.submitted.v1.invalid-rating-out-of-range.json":                 "/rating",
	"experiments.get.request.v1.invalid-bad-id.json":                         "/id",
	"experiments.get.request.v1.invalid-missing-id.json":                     "/id: missing",
	"experiments.get.response.v1.invalid-bad-status.json":                    "/experiment/status",
	"experiments.get.response.v1.invalid-missing-experiment.json":            "/experiment or /error: missing",
	"experiments.list.request.v1.invalid-bad-status.json":                    "/status",
	"experiments.list.request.v1.invalid-limit-out-of-range.json":            "/limit: got 201, want <= 200",
	"experiments.list.response.v1.invalid-report-in-list.json":               "/experiments/0/queries: not allowed",
	"experiments.list.response.v1.invalid-results-and-error.json":            "/experiments: not allowed here",
	"experiments.trials.request.v1.invalid-missing-id.json":                  "/id: missing",
	"experiments.trials.request.v1.invalid-negative-query.json":              "/query: got -1, want >= 0",
	"experiments.trials.response.v1.invalid-score-out-of-range.json":         "/trials/0/score: got 1.5, want <= 1",
	"experiments.trials.response.v1.invalid-trial-missing-pass.json":         "/trials/0/pass: missing",
	"feedback.submitted.v1.invalid-tool-without-tool-name.json":              "/tool_name: missing",
	"indexer.rejected.v1.invalid-bad-event-type.json":                        "/event_type",
	"indexer.rejected.v1.invalid-missing-event-id.json":                      "/event_id: missing",
	"lab.rejected.v1.invalid-bad-event-type.json":                            "/event_type",
	"lab.rejected.v1.invalid-missing-event-id.json":                          "/event_id: missing",
	"lab.rejected.v1.invalid-missing-reason-code.json":                       "/reason_code: missing",
	"prompt.activated.v1.invalid-bad-label.json":                             "/label",
	"prompt.activated.v1.invalid-missing-label.json":                         "/label: missing",
	"prompt.activated.v1.invalid-version-not-integer.json":                   "/version: got number, want integer",
	"prompt.activated.v1.invalid-version-too-large.json":                     "/version",
	"prompt.created.v1.invalid-bad-type.json":                                "/type",
	"prompt.created.v1.invalid-missing-content.json":                         "/content: missing",
	"prompt.created.v1.invalid-parameter-missing-name.json":                  "/parameters/0/name: missing",
	"prompt.created.v1.invalid-parameter-unknown-field.json":                 "/parameters/0/kind: not allowed",
	"prompt.created.v1.invalid-version-too-large.json":                       "/version",
	"prompt.created.v1.invalid-version-zero.json":                            "/version",
	"prompt.indexed.v1.invalid-embedding-dim-zero.json":                      "/embedding_dim",
	"prompt.indexed.v1.invalid-labels-not-array.json":                        "/labels: got string, want array",
	"prompt.indexed.v1.invalid-missing-content-hash.json":                    "/content_hash: missing",
	"prompt.rated.v1.invalid-missing-rating.json":                            "/rating: missing",
	"prompt.rated.v1.invalid-negative-tokens.json":                           "/tokens_used",
	"prompt.rated.v1.invalid-no-prompt-reference.json":                       "/prompt_hash or /prompt_id and /version: missing",
	"prompt.used.v1.invalid-id-without-version.json":                         "/version",
	"prompt.used.v1.invalid-missing-success.json":                            "/success: missing",
	"prompt.used.v1.invalid-no-prompt-reference.json":                        "/prompt_hash or /prompt_id and /version: missing",
	"prompt.used.v1.invalid-rating-out-of-range.json":                        "/llm_rating",
	"prompts.get.request.v1.invalid-bad-label.json":                          "/label",
	"prompts.get.request.v1.invalid-missing-id.json":                         "/id: missing",
	"prompts.get.request.v1.invalid-version-and-label.json":                  "/label: not allowed here",
	"prompts.get.request.v1.invalid-version-zero.json":                       "/version: got 0, want >= 1",
	"prompts.get.response.v1.invalid-missing-prompt.json":                    "/prompt or /error: missing",
	"prompts.get.response.v1.invalid-error-and-prompt.json":                  "/prompt: not allowed here; /rendered: not allowed here",
	"prompts.get.response.v1.invalid-prompt-unknown-field.json":              "/prompt/body: not allowed",
	"prompts.list.request.v1.invalid-limit-out-of-range.json":                "/limit",
	"prompts.list.request.v1.invalid-bad-cursor.json":                        "/cursor",
	"prompts.list.response.v1.invalid-prompt-with-content.json":              "/prompts/0/content: not allowed",
	"prompts.list.response.v1.invalid-error-and-prompts.json":                "/prompts: not allowed here",
	"quality.changed.v1.invalid-missing-quality-score.json":                  "/quality_score: missing",
	"quality.changed.v1.invalid-negative-total-calls.json":                   "/total_calls",
	"quality.changed.v1.invalid-state-version-zero.json":                     "/state_version",
	"quality.changed.v1.invalid-prompt-without-identity.json":                "/prompt_hash or /version: missing",
	"quality.changed.v1.invalid-success-rate-out-of-range.json":              "/success_rate",
	"quality.changed.v1.invalid-tool-without-tool-name.json":                 "/tool_name: missing",
	"rater.rejected.v1.invalid-bad-event-type.json":                          "/event_type",
	"rater.rejected.v1.invalid-missing-event-id.json":                        "/event_id: missing",
	"scorer.rejected.v1.invalid-bad-event-type.json":                         "/event_type",
	"search.prompts.request.v1.invalid-bad-type.json":                        "/type: got \"prompt\"",
	"search.prompts.request.v1.invalid-empty-query.json":                     "/query: got 0 characters, want at least 1",
	"search.prompts.request.v1.invalid-limit-out-of-range.json":              "/limit: got 51, want <= 50",
	"search.prompts.request.v1.invalid-missing-query.json":                   "/query: missing",
	"search.prompts.request.v1.invalid-params-not-object.json":               "/params: got array, want object",
	"search.prompts.request.v1.invalid-query-too-long.json":                  "/query: got 2001 characters, want at most 2000",
	"search.prompts.response.v1.invalid-bad-error-code.json":                 "/error/code: got \"oops\"",
	"search.prompts.response.v1.invalid-bad-retrieval-mode.json":             "/retrieval/mode: got \"keyword\"",
	"search.prompts.response.v1.invalid-component-out-of-range.json":         "/results/0/components/similarity: got 1.5, want <= 1",
	"search.prompts.response.v1.invalid-neither-results-nor-error.json":      "/results or /error: missing",
	"search.prompts.response.v1.invalid-result-missing-prompt.json":          "/results/0/prompt: missing",
	"search.prompts.response.v1.invalid-results-and-error.json":              "/results: not allowed here",
	"search.tools.request.v1.invalid-bad-exclude-name.json":                  "/exclude_names/0",
	"search.tools.request.v1.invalid-limit-out-of-range.json":                "/limit: got 101, want <= 100",
	"search.tools.request.v1.invalid-min-quality-out-of-range.json":          "/min_quality: got 1.5, want <= 1",
	"search.tools.request.v1.invalid-missing-query.json":                     "/query: missing",
	"search.tools.response.v1.invalid-error-missing-message.json":            "/error/message: missing",
	"search.tools.response.v1.invalid-missing-score.json":                    "/results/0/score: missing",
	"search.tools.response.v1.invalid-quarantined-tool.json":                 "/results/0/tool/state: got \"quarantined\"",
	"scorer.rejected.v1.invalid-missing-event-id.json":                       "/event_id: missing",
	"tool.degraded.v1.invalid-bad-state.json":                                "/state",
	"tool.degraded.v1.invalid-degraded-since-not-date-time.json":             "/degraded_since",
	"tool.degraded.v1.invalid-missing-threshold.json":                        "/threshold: missing",
	"tool.executed.v1.invalid-input-not-object.json":                         "/input: got array, want object",
	"tool.executed.v1.invalid-missing-tool-name.json":                        "/tool_name: missing",
	"tool.executed.v1.invalid-negative-latency.json":                         "/latency_ms",
	"tool.executed.v1.invalid-negative-step-idx.json":                        "/step_idx",
	"tool.executed.v1.invalid-output-too-long.json":                          "/output",
	"tool.executed.v1.invalid-rating-out-of-range.json":                      "/llm_rating",
	"tool.executed.v1.invalid-success-not-bool.json":                         "/success: got string, want boolean",
	"tool.executed.v1.invalid-tool-name-too-long.json":                       "/tool_name",
	"tool.indexed.v1.invalid-bad-tool-name.json":                             "/tool_name",
	"tool.indexed.v1.invalid-missing-version.json":                           "/version: missing",
	"tool.quarantined.v1.invalid-expires-at-not-date-time.json":              "/quarantine/expires_at",
	"tool.quarantined.v1.invalid-missing-tool-name.json":                     "/tool_name: missing",
	"tool.quarantined.v1.invalid-quarantine-offence-zero.json":               "/quarantine/offence",
	"tool.quarantined.v1.invalid-quarantine-unknown-field.json":              "/quarantine/until: not allowed",
	"tool.rated.v1.invalid-bad-rater-kind.json":                              "/rater_kind",
	"tool.rated.v1.invalid-bad-rater.json":                                   "/rater",
	"tool.rated.v1.invalid-missing-rater-kind.json":                          "/rater_kind: missing",
	"tool.rated.v1.invalid-rating-out-of-range.json":                         "/rating",
	"tool.recovered.v1.invalid-missing-state.json":                           "/state: missing",
	"tool.recovered.v1.invalid-quality-score-out-of-range.json":              "/quality_score",
	"tool.registered.v1.invalid-bad-name.json":                               "/name",
	"tool.registered.v1.invalid-input-schema-not-object.json":                "/input_schema: got string, want object",
	"tool.registered.v1.invalid-missing-description.json":                    "/description: missing",
	"degrader.timer.v1.invalid-bad-tool-name.json":                           "/tool_name",
	"degrader.timer.v1.invalid-missing-due-at.json":                          "/due_at: missing",
	"tool.released.v1.invalid-bad-tool-name.json":                            "/tool_name",
	"tool.released.v1.invalid-missing-tool-name.json":                        "/tool_name: missing",
}

type fixture struct {
	file  string // base name in testdata/
	typ   string // CloudEvents type, e.g. agentq.tool.executed.v1
	valid bool
	data  []byte
}

func loadRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := Load()
	require.NoError(t, err)
	return r
}

func readFixtures(t testing.TB) []fixture {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	require.NoError(t, err)
	var out []fixture
	for _, e := range entries {
		if e.IsDir() { // testdata/fuzz holds the fuzz corpus
			continue
		}
		m := fixtureRE.FindStringSubmatch(e.Name())
		require.NotNil(t, m, "testdata/%s: name must be <domain>.<event>.v<N>.valid[-<case>].json or .invalid-<case>.json", e.Name())
		data, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		require.NoError(t, err)
		out = append(out, fixture{
			file:  e.Name(),
			typ:   typePrefix + m[1],
			valid: strings.HasPrefix(m[2], "valid"),
			data:  data,
		})
	}
	require.NotEmpty(t, out)
	return out
}

// schemaFiles returns the schema files on disk, by CloudEvents type or
// message name.
func schemaFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.json")
	require.NoError(t, err)
	out := make(map[string]string, len(names))
	for _, n := range names {
		out[typePrefix+strings.TrimSuffix(n, ".json")] = n
	}
	return out
}

// eventTypeRE is the stream's event type pattern (bus.SubjectFor's); the
// bus cannot be imported here, it imports this package.
var eventTypeRE = regexp.MustCompile(`^agentq\.[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*\.v[0-9]+$`)

func TestLoad(t *testing.T) {
	r := loadRegistry(t)
	files := schemaFiles(t)
	types, messages := r.Types(), r.Messages()
	require.Len(t, append(slices.Clone(types), messages...), len(files))
	require.IsIncreasing(t, types)
	require.IsIncreasing(t, messages)
	for _, typ := range types {
		require.Contains(t, files, typ)
		require.True(t, r.Has(typ))
		require.Regexp(t, eventTypeRE, typ)
	}
	require.Equal(t, []string{
		"agentq.experiments.get.request.v1", "agentq.experiments.get.response.v1",
		"agentq.experiments.list.request.v1", "agentq.experiments.list.response.v1",
		"agentq.experiments.trials.request.v1", "agentq.experiments.trials.response.v1",
		"agentq.prompts.get.request.v1", "agentq.prompts.get.response.v1",
		"agentq.prompts.list.request.v1", "agentq.prompts.list.response.v1",
		"agentq.search.prompts.request.v1", "agentq.search.prompts.response.v1",
		"agentq.search.tools.request.v1", "agentq.search.tools.response.v1",
	}, messages)
	for _, name := range messages {
		require.Contains(t, files, name)
		require.True(t, r.Has(name))
		require.NotRegexp(t, eventTypeRE, name, "a message name must never be a stream event type")
		require.NotContains(t, types, name)
	}

	types[0] = "mutated"
	assert.NotEqual(t, "mutated", r.Types()[0], "Types must return a copy")
	messages[0] = "mutated"
	assert.NotEqual(t, "mutated", r.Messages()[0], "Messages must return a copy")
}

// TestSharedDefsAgree: the response schemas are self-contained, so an agent
// can load one file; the definitions they share must stay identical.
func TestSharedDefsAgree(t *testing.T) {
	seen := map[string]any{}
	from := map[string]string{}
	files := []string{"search.prompts.response.v1.json", "search.tools.response.v1.json", "prompts.get.response.v1.json", "prompts.list.response.v1.json"}
	for _, file := range files {
		defs, ok := readJSON(t, file)["$defs"].(map[string]any)
		require.True(t, ok, "%s: no $defs", file)
		for name, def := range defs {
			if prev, ok := seen[name]; ok {
				assert.Equal(t, prev, def, "$defs/%s differs between %s and %s", name, from[name], file)
				continue
			}
			seen[name], from[name] = def, file
		}
	}
	for _, name := range []string{"error", "prompt", "components", "retrieval"} {
		assert.Contains(t, seen, name)
	}
}

func TestSchemaFilesFollowContract(t *testing.T) {
	for typ, file := range schemaFiles(t) {
		t.Run(file, func(t *testing.T) {
			doc := readJSON(t, file)
			assert.Equal(t, draft2020, doc["$schema"])
			assert.Equal(t, URL(typ), doc["$id"], "$id must be URL(type)")
			assert.NotEmpty(t, doc["title"], "title")
			assert.Equal(t, "object", doc["type"], "data must be an object")
			assert.Equal(t, true, doc["additionalProperties"], "top level stays open for forward compatibility")
		})
	}
}

func TestFixtures(t *testing.T) {
	r := loadRegistry(t)
	for _, f := range readFixtures(t) {
		t.Run(f.file, func(t *testing.T) {
			err := r.Validate(f.typ, f.data)
			if f.valid {
				require.NoError(t, err)
				return
			}
			want, ok := invalidWant[f.file]
			require.True(t, ok, "add %s to invalidWant with the offending path", f.file)
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			assert.Equal(t, f.typ, verr.Type)
			assert.Contains(t, err.Error(), want)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestEverySchemaHasFixtures(t *testing.T) {
	valid := map[string]int{}
	invalid := map[string]int{}
	for _, f := range readFixtures(t) {
		if f.valid {
			valid[f.typ]++
		} else {
			invalid[f.typ]++
		}
	}
	for typ := range schemaFiles(t) {
		assert.GreaterOrEqual(t, valid[typ], 1, "%s: needs a valid fixture", typ)
		assert.GreaterOrEqual(t, invalid[typ], 2, "%s: needs two invalid fixtures", typ)
	}
}

func TestFixturesReferToSchemas(t *testing.T) {
	r := loadRegistry(t)
	files := map[string]bool{}
	for _, f := range readFixtures(t) {
		assert.True(t, r.Has(f.typ), "%s: no schema for %s", f.file, f.typ)
		files[f.file] = true
	}
	for file := range invalidWant {
		assert.True(t, files[file], "invalidWant names %s, which is not in testdata", file)
	}
}

// TestUnknownType: a type without a schema is ErrUnknownType, never a
// ValidationError, whatever the data, so the runner can dead-letter it as
// unknown_type rather than schema.
func TestUnknownType(t *testing.T) {
	r := loadRegistry(t)
	for _, typ := range []string{"agentq.tool.executed.v7", "agentq.tool.exploded.v1", "agentq.tool.executed.v2",
		"agentq.search.prompts.request.v2", "", "tool.executed", strings.Repeat("x", 10000)} {
		assert.False(t, r.Has(typ))
		for _, data := range []string{`{}`, `{"tool_name": "x", "success": true}`, `not json`} {
			err := r.Validate(typ, []byte(data))
			require.ErrorIs(t, err, ErrUnknownType, "type %q", typ)
			var verr *ValidationError
			assert.False(t, errors.As(err, &verr))
			assert.True(t, strings.HasPrefix(err.Error(), "schemas: unknown event type "), err.Error())
			assert.Less(t, len(err.Error()), 120, "the type is quoted short")
		}
	}
	err := r.Validate("agentq.tool.executed.v7", []byte(`{}`))
	assert.EqualError(t, err, `schemas: unknown event type "agentq.tool.executed.v7"`)
}

// TestNumbersTheValidatorCannotHandle: numbers that would make the
// validator panic (exponents beyond a million) or spend quadratic time
// (huge digit strings) are problems, reported at their path, in a fixed
// order.
func TestNumbersTheValidatorCannotHandle(t *testing.T) {
	r := loadRegistry(t)
	long := "0." + strings.Repeat("1", 1100)
	tests := []struct {
		name, data, want string
	}{
		{"exponent that panics math/big", `{"tool_name": "x", "success": true, "llm_rating": 1e-9999999}`, `/llm_rating: number "1e-9999999" has an exponent beyond ±1000`},
		{"exponent beyond the bound", `{"tool_name": "x", "success": true, "latency_ms": 1E+1001}`, `/latency_ms: number "1E+1001" has an exponent beyond ±1000`},
		{"beyond float64", `{"tool_name": "x", "success": true, "latency_ms": 1e400}`, `/latency_ms: number "1e400" is beyond the range of a float64`},
		{"too many digits", `{"tool_name": "x", "success": true, "llm_rating": ` + long + `}`, `/llm_rating: number of 1102 characters, want at most 1000`},
		{"nested and sorted", `{"tool_name": "x", "success": true, "input": {"b": [1, 1e5000], "a": 1e-5000}}`, `/input/a: number "1e-5000" has an exponent beyond ±1000; /input/b/1: number "1e5000" has an exponent beyond ±1000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Validate("agentq.tool.executed.v1", []byte(tt.data))
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			assert.Equal(t, "data does not match agentq.tool.executed.v1: "+tt.want, err.Error())
		})
	}
	for _, ok := range []string{
		`{"tool_name": "x", "success": true, "llm_rating": 1e-300}`,
		`{"tool_name": "x", "success": true, "llm_rating": 0.25, "latency_ms": 12, "input": {"id": 123456789012345678901234567890}}`,
		`{"tool_name": "x", "success": true, "llm_rating": 0e-1000}`,
	} {
		require.NoError(t, r.Validate("agentq.tool.executed.v1", []byte(ok)), ok)
	}
}

// TestInvalidUTF8: bad bytes are a problem, not silently replaced by
// U+FFFD as encoding/json would.
func TestInvalidUTF8(t *testing.T) {
	r := loadRegistry(t)
	err := r.Validate("agentq.tool.executed.v1", []byte("{\"tool_name\": \"x\xff\", \"success\": true}"))
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, []string{"not valid UTF-8 (byte 16)"}, verr.Problems)
}

func TestMalformedData(t *testing.T) {
	r := loadRegistry(t)
	tests := []struct {
		name, data, want string
	}{
		{"empty", ``, "not valid JSON"},
		{"blank", " \n", "not valid JSON"},
		{"not json", `tool_name=web_search`, "not valid JSON"},
		{"truncated", `{"tool_name": "web_search", "success": tr`, "not valid JSON"},
		{"trailing data", `{"tool_name": "x", "success": true} {}`, "not valid JSON"},
		{"array", `[{"tool_name": "web_search", "success": true}]`, "/: got array, want object"},
		{"string", `"web_search"`, "/: got string, want object"},
		{"null", `null`, "/: got null, want object"},
		{"number", `42`, "/: got number, want object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Validate("agentq.tool.executed.v1", []byte(tt.data))
			var verr *ValidationError
			require.ErrorAs(t, err, &verr)
			assert.Equal(t, "agentq.tool.executed.v1", verr.Type)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	r := loadRegistry(t)

	err := r.Validate("agentq.tool.executed.v1", []byte(`{"success": "yes"}`))
	require.EqualError(t, err, "data does not match agentq.tool.executed.v1: /success: got string, want boolean; /tool_name: missing")
	var verr *ValidationError
	require.ErrorAs(t, err, &verr)
	assert.Equal(t, []string{"/success: got string, want boolean", "/tool_name: missing"}, verr.Problems)

	// Many problems: the message lists five and counts the rest.
	err = r.Validate("agentq.tool.executed.v1", []byte(`{"tool_name": 1, "success": 2, "run_id": 3, "step_idx": -1,
		"latency_ms": -1, "error_class": 4, "input": 5, "output": 6, "llm_rating": 7}`))
	require.ErrorAs(t, err, &verr)
	assert.Len(t, verr.Problems, 9)
	assert.Equal(t, 5, strings.Count(err.Error(), "; "), "five problems and the count of the rest")
	assert.True(t, strings.HasSuffix(err.Error(), "; and 4 more"), err.Error())

	// Untrusted values are quoted short, and every line stays bounded.
	long := strings.Repeat("x", 10000)
	err = r.Validate("agentq.tool.executed.v1", []byte(`{"tool_name": "`+long+`!", "success": true}`))
	require.ErrorAs(t, err, &verr)
	assert.Less(t, len(err.Error()), 400, err.Error())
	assert.Contains(t, err.Error(), "/tool_name: ")
}

func TestValidationErrorPointerEscaping(t *testing.T) {
	r := loadRegistry(t)
	err := r.Validate("agentq.experiment.requested.v1", []byte(`{"prompt_id": "p", "auto": {"a/b~c": 1}}`))
	assert.ErrorContains(t, err, "/auto/a~1b~0c: not allowed")
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	const head = `"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://agentq.dev/schemas/test.bad.v1.json"`
	tests := []struct {
		name, file, content, want string
	}{
		{"bad file name", "Test.Bad.json", `{}`, "Test.Bad.json: file name"},
		{"not json", "test.bad.v1.json", `{`, "parse test.bad.v1.json"},
		{"not an object", "test.bad.v1.json", `[]`, "test.bad.v1.json: not a JSON object"},
		{"wrong draft", "test.bad.v1.json", `{"$schema": "http://json-schema.org/draft-07/schema#"}`, "test.bad.v1.json: $schema"},
		{"wrong id", "test.bad.v1.json", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.com/x.json"}`, "test.bad.v1.json: $id"},
		{"invalid schema", "test.bad.v1.json", `{` + head + `, "type": "strnig"}`, "compile test.bad.v1.json"},
		{"remote ref", "test.bad.v1.json", `{` + head + `, "$ref": "https://example.com/other.json"}`, "refusing to load https://example.com/other.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(fstest.MapFS{tt.file: {Data: []byte(tt.content)}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	_, err := load(fstest.MapFS{})
	assert.Error(t, err, "no schema files")
}

func TestAlternativesMessage(t *testing.T) {
	r, err := load(fstest.MapFS{"test.alt.v1.json": {Data: []byte(`{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"$id": "https://agentq.dev/schemas/test.alt.v1.json",
		"type": "object",
		"properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 1}]}}
	}`)}})
	require.NoError(t, err)
	require.NoError(t, r.Validate("agentq.test.alt.v1", []byte(`{"v": 2}`)))
	err = r.Validate("agentq.test.alt.v1", []byte(`{"v": 0}`))
	assert.EqualError(t, err, "data does not match agentq.test.alt.v1: /v: matches no alternative: /v: got number, want string | /v: got 0, want >= 1")
}

func TestURL(t *testing.T) {
	tests := map[string]string{
		"agentq.tool.executed.v1":      "https://agentq.dev/schemas/tool.executed.v1.json",
		"agentq.lab.rejected.v1":       "https://agentq.dev/schemas/lab.rejected.v1.json",
		"agentq.prompt.created.v12":    "https://agentq.dev/schemas/prompt.created.v12.json",
		"tool.executed.v1":             "",
		"agentq.tool.executed":         "",
		"agentq.tool.executed.v0":      "",
		"agentq.tool/../x.executed.v1": "",
		"":                             "",
	}
	for typ, want := range tests {
		assert.Equal(t, want, URL(typ), "URL(%q)", typ)
	}
}

// TestDescriptions checks that the schemas document themselves: every
// schema, every property (at any depth) and every $defs entry has a
// description, and every nested object that lists properties is closed
// (additionalProperties: false). Conditional subschemas (if/then/anyOf/...)
// only restate constraints on properties described elsewhere, so they are
// not walked.
func TestDescriptions(t *testing.T) {
	for _, file := range schemaFiles(t) {
		t.Run(file, func(t *testing.T) {
			doc := readJSON(t, file)
			requireDescription(t, doc, "#")
			walkSchema(t, doc, "#", true)
		})
	}
}

func walkSchema(t *testing.T, node map[string]any, at string, root bool) {
	t.Helper()
	if props, ok := node["properties"].(map[string]any); ok {
		if !root {
			assert.Equal(t, false, node["additionalProperties"], "%s: nested objects must set additionalProperties: false", at)
		}
		for name, p := range props {
			prop, ok := p.(map[string]any)
			require.True(t, ok, "%s/properties/%s: not an object", at, name)
			requireDescription(t, prop, at+"/properties/"+name)
			walkSchema(t, prop, at+"/properties/"+name, false)
		}
	}
	if defs, ok := node["$defs"].(map[string]any); ok {
		for name, d := range defs {
			def := d.(map[string]any)
			requireDescription(t, def, at+"/$defs/"+name)
			walkSchema(t, def, at+"/$defs/"+name, false)
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		walkSchema(t, items, at+"/items", false)
	}
}

func requireDescription(t *testing.T, node map[string]any, at string) {
	t.Helper()
	d, _ := node["description"].(string)
	assert.NotEmpty(t, strings.TrimSpace(d), "%s: missing description", at)
}

func readJSON(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

func TestValidateConcurrently(t *testing.T) {
	r := loadRegistry(t)
	fixtures := readFixtures(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, f := range fixtures {
				err := r.Validate(f.typ, f.data)
				if f.valid != (err == nil) {
					t.Errorf("%s: unexpected result %v", f.file, err)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkValidateToolExecuted(b *testing.B) {
	r := loadRegistry(b)
	data, err := os.ReadFile(filepath.Join("testdata", "tool.executed.v1.valid.json"))
	require.NoError(b, err)
	data = bytes.Clone(data)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := r.Validate("agentq.tool.executed.v1", data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDocument(t *testing.T) {
	b, err := Document("agentq.tool.executed.v1")
	require.NoError(t, err)
	want, err := os.ReadFile("tool.executed.v1.json")
	require.NoError(t, err)
	require.Equal(t, want, b)
	b, err = Document("agentq.prompts.list.request.v1")
	require.NoError(t, err)
	require.Contains(t, string(b), `"cursor"`)
	for _, name := range []string{"agentq.tool.exploded.v1", "tool.executed", "agentq.tool.executed.v2"} {
		_, err := Document(name)
		require.ErrorIs(t, err, ErrUnknownType, name)
	}
}
