package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureRE matches testdata file names: <domain>.<event>.v<N>.valid[-<case>].json
// and <domain>.<event>.v<N>.invalid-<case>.json.
var fixtureRE = regexp.MustCompile(`^([a-z][a-z_]*\.[a-z][a-z_]*\.v[1-9][0-9]*)\.(valid(?:-[a-z0-9-]+)?|invalid-[a-z0-9-]+)\.json$`)

// invalidWant maps every invalid fixture to a substring its error message
// must contain: the JSON pointer of the offending value, often with the
// problem. Adding an invalid fixture without an entry fails TestFixtures.
var invalidWant = map[string]string{
	"degrader.rejected.v1.invalid-bad-event-type.json":                       "/event_type",
	"degrader.rejected.v1.invalid-missing-event-id.json":                     "/event_id: missing",
	"experiment.cancelled.v1.invalid-missing-experiment-id.json":             "/experiment_id: missing",
	"experiment.cancelled.v1.invalid-reason-not-string.json":                 "/reason: got number, want string",
	"experiment.completed.v1.invalid-bad-confidence.json":                    "/report/recommendation/confidence",
	"experiment.completed.v1.invalid-missing-report.json":                    "/report: missing",
	"experiment.completed.v1.invalid-no-versions.json":                       "/report/versions",
	"experiment.completed.v1.invalid-pass-rate-out-of-range.json":            "/report/versions/1/pass_rate",
	"experiment.completed.v1.invalid-tier-breakdown-unknown-tier.json":       "/report/versions/0/tier_breakdown/judge: not allowed",
	"experiment.completed.v1.invalid-version-summary-missing-version.json":   "/report/versions/2/version: missing",
	"experiment.failed.v1.invalid-bad-reason-code.json":                      "/reason_code",
	"experiment.failed.v1.invalid-missing-reason.json":                       "/reason: missing",
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
	"feedback.submitted.v1.invalid-tool-without-tool-name.json":              "/tool_name: missing",
	"indexer.rejected.v1.invalid-bad-event-type.json":                        "/event_type",
	"indexer.rejected.v1.invalid-missing-event-id.json":                      "/event_id: missing",
	"lab.rejected.v1.invalid-bad-event-type.json":                            "/event_type",
	"lab.rejected.v1.invalid-missing-event-id.json":                          "/event_id: missing",
	"lab.rejected.v1.invalid-missing-reason-code.json":                       "/reason_code: missing",
	"prompt.activated.v1.invalid-bad-label.json":                             "/label",
	"prompt.activated.v1.invalid-missing-label.json":                         "/label: missing",
	"prompt.activated.v1.invalid-version-not-integer.json":                   "/version: got number, want integer",
	"prompt.created.v1.invalid-bad-type.json":                                "/type",
	"prompt.created.v1.invalid-missing-content.json":                         "/content: missing",
	"prompt.created.v1.invalid-parameter-missing-name.json":                  "/parameters/0/name: missing",
	"prompt.created.v1.invalid-parameter-unknown-field.json":                 "/parameters/0/kind: not allowed",
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
	"quality.changed.v1.invalid-missing-quality-score.json":                  "/quality_score: missing",
	"quality.changed.v1.invalid-negative-total-calls.json":                   "/total_calls",
	"quality.changed.v1.invalid-prompt-without-identity.json":                "/prompt_hash or /version: missing",
	"quality.changed.v1.invalid-success-rate-out-of-range.json":              "/success_rate",
	"quality.changed.v1.invalid-tool-without-tool-name.json":                 "/tool_name: missing",
	"rater.rejected.v1.invalid-bad-event-type.json":                          "/event_type",
	"rater.rejected.v1.invalid-missing-event-id.json":                        "/event_id: missing",
	"scorer.rejected.v1.invalid-bad-event-type.json":                         "/event_type",
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

func readFixtures(t *testing.T) []fixture {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	require.NoError(t, err)
	var out []fixture
	for _, e := range entries {
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

// schemaFiles returns the schema files on disk, by CloudEvents type.
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

func TestLoad(t *testing.T) {
	r := loadRegistry(t)
	files := schemaFiles(t)
	types := r.Types()
	require.Len(t, types, len(files))
	require.IsIncreasing(t, types)
	for _, typ := range types {
		require.Contains(t, files, typ)
		require.True(t, r.Has(typ))
	}

	types[0] = "mutated"
	assert.NotEqual(t, "mutated", r.Types()[0], "Types must return a copy")
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

func TestUnknownType(t *testing.T) {
	r := loadRegistry(t)
	for _, typ := range []string{"agentq.tool.exploded.v1", "agentq.tool.executed.v2", "", "tool.executed"} {
		assert.False(t, r.Has(typ))
		err := r.Validate(typ, []byte(`{}`))
		require.ErrorIs(t, err, ErrUnknownType, "type %q", typ)
		var verr *ValidationError
		assert.False(t, errors.As(err, &verr))
	}
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
