package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/schemas"
)

// writeFiles writes name → content into a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// Files hold one definition or a list, in YAML (several documents too) or
// JSON; a directory is its *.yaml, *.yml and *.json files sorted by name;
// "-" is stdin. Each entry knows its file, position and YAML line.
func TestLoadEntries(t *testing.T) {
	type want struct {
		source string // relative to the directory; "stdin" as is
		index  int
		line   int
		data   string // JSON
	}
	tests := []struct {
		name  string
		files map[string]string
		path  string // relative to the directory
		stdin string
		want  []want
	}{
		{
			name:  "yaml one mapping",
			files: map[string]string{"p.yaml": "id: a\ntype: task\nname: A\ncontent: hi {{.X}}\n"},
			path:  "p.yaml",
			want:  []want{{"p.yaml", 1, 1, `{"id":"a","type":"task","name":"A","content":"hi {{.X}}"}`}},
		},
		{
			name:  "yaml list",
			files: map[string]string{"p.yml": "# two\n- id: a\n  version: 2\n- id: b\n  tags: [x, y]\n"},
			path:  "p.yml",
			want: []want{
				{"p.yml", 1, 2, `{"id":"a","version":2}`},
				{"p.yml", 2, 4, `{"id":"b","tags":["x","y"]}`},
			},
		},
		{
			name:  "yaml documents",
			files: map[string]string{"p.yaml": "id: a\n---\n- id: b\n- id: c\n---\n"},
			path:  "p.yaml",
			want: []want{
				{"p.yaml", 1, 1, `{"id":"a"}`},
				{"p.yaml", 2, 3, `{"id":"b"}`},
				{"p.yaml", 3, 4, `{"id":"c"}`},
			},
		},
		{
			name: "yaml scalars as JSON would have them",
			files: map[string]string{"p.yaml": `id: a
day: 2026-10-30
quoted: "12"
n: 12
f: 1.5
yes: true
no: null
big: 123456789012345678901234567890
`},
			path: "p.yaml",
			want: []want{{"p.yaml", 1, 1, `{"id":"a","day":"2026-10-30","quoted":"12","n":12,"f":1.5,"yes":true,"no":null,"big":1.2345678901234568e+29}`}},
		},
		{
			name: "yaml anchors and merge keys",
			files: map[string]string{"p.yaml": `- &base
  id: a
  tags: [t]
  author: me
- <<: *base
  id: b
`},
			path: "p.yaml",
			want: []want{
				{"p.yaml", 1, 1, `{"id":"a","tags":["t"],"author":"me"}`},
				{"p.yaml", 2, 5, `{"id":"b","tags":["t"],"author":"me"}`},
			},
		},
		{
			name:  "json one object",
			files: map[string]string{"p.json": `{"id":"a","version":3,"metadata":{"w":0.10}}`},
			path:  "p.json",
			want:  []want{{"p.json", 1, 0, `{"id":"a","version":3,"metadata":{"w":0.10}}`}},
		},
		{
			name:  "json list",
			files: map[string]string{"p.json": "[{\"id\":\"a\"},\n {\"id\":\"b\"}]\n"},
			path:  "p.json",
			want:  []want{{"p.json", 1, 0, `{"id":"a"}`}, {"p.json", 2, 0, `{"id":"b"}`}},
		},
		{
			name: "directory: matching files sorted, nothing else",
			files: map[string]string{
				"b.json": `{"id":"b"}`, "a.yaml": "id: a", "c.YML": "- id: c", "notes.txt": "id: x",
				"sub/d.yaml": "id: d",
			},
			path: ".",
			want: []want{{"a.yaml", 1, 1, `{"id":"a"}`}, {"b.json", 1, 0, `{"id":"b"}`}, {"c.YML", 1, 1, `{"id":"c"}`}},
		},
		{
			name:  "stdin, JSON read as YAML",
			path:  "-",
			stdin: `[{"id": "a", "n": 1}]`,
			want:  []want{{"stdin", 1, 1, `{"id":"a","n":1}`}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			path := tc.path
			if path != "-" {
				path = filepath.Join(dir, path)
			}
			ens, err := loadEntries(Env{Stdin: strings.NewReader(tc.stdin)}, path)
			require.NoError(t, err)
			require.Len(t, ens, len(tc.want))
			for i, w := range tc.want {
				src := w.source
				if src != "stdin" {
					src = filepath.Join(dir, src)
				}
				require.Equal(t, src, ens[i].source, "entry %d", i)
				require.Equal(t, w.index, ens[i].index, "entry %d", i)
				require.Equal(t, w.line, ens[i].line, "entry %d", i)
				require.JSONEq(t, w.data, string(ens[i].raw), "entry %d", i)
			}
		})
	}
}

// Unreadable input is refused with the file, the entry or the line.
func TestLoadEntriesErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		path  string
		want  string
	}{
		{"missing file", nil, "nope.yaml", "nope.yaml: no such file or directory"},
		{"empty yaml", map[string]string{"e.yaml": "# nothing\n"}, "e.yaml", "e.yaml: no definitions in the file"},
		{"empty json", map[string]string{"e.json": "  \n"}, "e.json", "e.json: empty file"},
		{"yaml syntax", map[string]string{"s.yaml": "id: a\n  name: [b\n"}, "s.yaml", "s.yaml: not valid YAML: yaml: line 2"},
		{"json syntax", map[string]string{"s.json": `{"id": "a",}`}, "s.json", "s.json: not valid JSON: invalid character '}'"},
		{"json trailing data", map[string]string{"s.json": `{"id":"a"} {"id":"b"}`}, "s.json", "s.json: not valid JSON: more data after the first value"},
		{"list item not a mapping", map[string]string{"l.yaml": "- id: a\n- just text\n"}, "l.yaml", "l.yaml entry 2 (line 2): want a mapping (an object) with the fields of the definition, got a string"},
		{"json list item not an object", map[string]string{"l.json": `[{"id":"a"}, [1]]`}, "l.json", "l.json entry 2: want a mapping (an object) with the fields of the definition, got a list"},
		{"yaml scalar document", map[string]string{"l.yaml": "hello\n"}, "l.yaml", "l.yaml entry 1 (line 1): want a mapping (an object) with the fields of the definition, got a string"},
		{"not a JSON number", map[string]string{"n.yaml": "id: a\nweight: .inf\n"}, "n.yaml", "n.yaml: line 2: .inf is not a JSON number"},
		{"duplicate key", map[string]string{"d.yaml": "id: a\nname: x\nid: b\n"}, "d.yaml", `d.yaml: line 3: key "id" appears twice`},
		{"directory without definitions", map[string]string{"x.txt": "id: a"}, ".", ": no *.yaml, *.yml or *.json files in the directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			_, err := loadEntries(Env{}, filepath.Join(dir, tc.path))
			require.Error(t, err)
			require.Contains(t, err.Error(), dir, "the message names the file")
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// Every invalid entry is named by file, position, line and id, with the
// schema's reasons; valid ones pass.
func TestValidateEntries(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	dir := writeFiles(t, map[string]string{"p.yaml": `- id: ok
  type: task
  name: OK
  content: fine
- id: bad-type
  version: 2
  type: poem
  name: Bad
  content: x
- id: no-content
  type: system
  name: Empty
- type: task
  name: Nameless
  content: x
  parameters: [{name: "1st"}]
`})
	ens, err := loadEntries(Env{}, filepath.Join(dir, "p.yaml"))
	require.NoError(t, err)
	err = validateEntries(reg, indexer.TypePromptCreated, ens, promptCatalog.label)
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	p := filepath.Join(dir, "p.yaml")
	require.Equal(t, []string{
		"3 entries are invalid; nothing was published:",
		"  " + p + " entry 2 (line 5) (bad-type@2): data does not match agentq.prompt.created.v1: /type: got \"poem\", want one of \"system\", \"user\", \"task\", \"repair\", \"routing\", \"tool_description\", \"chain_of_thought\", \"custom\"",
		"  " + p + " entry 3 (line 10) (no-content): data does not match agentq.prompt.created.v1: /content: missing",
		"  " + p + " entry 4 (line 13): data does not match agentq.prompt.created.v1: /id: missing; /parameters/0/name: \"1st\" does not match pattern ^[A-Za-z_][A-Za-z0-9_]{0,63}$",
	}, lines)
	require.NoError(t, validateEntries(reg, indexer.TypePromptCreated, ens[:1], promptCatalog.label))
}

// The examples of the README are valid prompts and tools, and every
// prompt's template passes the library's checks and renders.
func TestExamplesAreValid(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	prompts, err := loadEntries(Env{}, filepath.Join("..", "..", "examples", "prompts.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(prompts), 4)
	require.NoError(t, validateEntries(reg, indexer.TypePromptCreated, prompts, promptCatalog.label))
	types := map[string]bool{}
	for _, en := range prompts {
		var p struct {
			Type       string          `json:"type"`
			Content    string          `json:"content"`
			Parameters []library.Param `json:"parameters"`
		}
		require.NoError(t, json.Unmarshal(en.raw, &p))
		types[p.Type] = true
		require.NoError(t, library.CheckTemplate(p.Content, p.Parameters), en.where())
		values := map[string]any{}
		for _, pa := range p.Parameters {
			if pa.Required {
				values[pa.Name] = map[string]any{"array": []any{"billing", "sales"}}[pa.Type]
				if values[pa.Name] == nil {
					values[pa.Name] = "sample " + pa.Name
				}
			}
		}
		out, err := library.Render(context.Background(), p.Content, p.Parameters, values, library.Limits{})
		require.NoError(t, err, en.where())
		require.NotContains(t, out, "<no value>", en.where())
	}
	require.GreaterOrEqual(t, len(types), 4, "prompts of different types")

	tools, err := loadEntries(Env{}, filepath.Join("..", "..", "examples", "tools.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(tools), 6)
	require.NoError(t, validateEntries(reg, indexer.TypeToolRegistered, tools, toolCatalog.label))
	for _, en := range tools {
		require.Contains(t, en.data, "input_schema", en.where())
		require.Contains(t, en.data, "server", en.where())
	}
}

// An entry's event id depends on tenant, type, content and window only: not
// on how the file writes it (key order, YAML or JSON).
func TestCatalogEventID(t *testing.T) {
	canon := func(src string, isJSON bool) []byte {
		ens, err := parseEntries("x", []byte(src), isJSON)
		require.NoError(t, err)
		require.Len(t, ens, 1)
		return ens[0].raw
	}
	a := canon("id: a\ntype: task\nname: A\ncontent: hi\nversion: 1\ntags: [x]\n", false)
	base := catalogEventID("demo", indexer.TypePromptCreated, 7, a)
	require.Len(t, base, 36)
	tests := []struct {
		name   string
		id     string
		sameAs bool
	}{
		{"again", catalogEventID("demo", indexer.TypePromptCreated, 7, a), true},
		{"keys reordered", catalogEventID("demo", indexer.TypePromptCreated, 7, canon("version: 1\ncontent: hi\ntags: [x]\nname: A\ntype: task\nid: a\n", false)), true},
		{"as JSON", catalogEventID("demo", indexer.TypePromptCreated, 7, canon(`{"tags":["x"],"id":"a","type":"task","name":"A","content":"hi","version":1}`, true)), true},
		{"other tenant", catalogEventID("acme", indexer.TypePromptCreated, 7, a), false},
		{"other type", catalogEventID("demo", indexer.TypeToolRegistered, 7, a), false},
		{"next window", catalogEventID("demo", indexer.TypePromptCreated, 8, a), false},
		{"other content", catalogEventID("demo", indexer.TypePromptCreated, 7, canon("id: a\ntype: task\nname: A\ncontent: hi!\nversion: 1\ntags: [x]\n", false)), false},
		{"other tags order", catalogEventID("demo", indexer.TypePromptCreated, 7, canon("id: a\ntype: task\nname: A\ncontent: hi\nversion: 1\ntags: [x, y]\n", false)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sameAs {
				require.Equal(t, base, tc.id)
			} else {
				require.NotEqual(t, base, tc.id)
			}
		})
	}
}

// Flags may come before, between and after the positional arguments; after
// "--" everything is positional.
func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		args    []string
		pos     []string
		version int
		tags    []string
	}{
		{[]string{"a"}, []string{"a"}, 0, nil},
		{[]string{"a", "--version", "2"}, []string{"a"}, 2, nil},
		{[]string{"--tag", "x", "a", "b", "--tag=y", "c"}, []string{"a", "b", "c"}, 0, []string{"x", "y"}},
		{[]string{"a", "--", "--version", "3"}, []string{"a", "--version", "3"}, 0, nil},
		{[]string{"--version", "4", "--", "-x"}, []string{"-x"}, 4, nil},
		{nil, nil, 0, nil},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			v := fs.Int("version", 0, "")
			var tags listFlag
			fs.Var(&tags, "tag", "")
			pos, err := parseInterleaved(fs, tc.args)
			require.NoError(t, err)
			require.Equal(t, tc.pos, pos)
			require.Equal(t, tc.version, *v)
			require.Equal(t, tc.tags, []string(tags))
		})
	}
}

// --param Name=value is a string, Name:=JSON any JSON value, and both
// override --params-json.
func TestParseParams(t *testing.T) {
	got, err := parseParams(`{"A":"json","B":1,"C":[1]}`, []string{"A=flag", "D:=3", "E:=true", "F=x=y", "G:=\"s\"", "H=", "I:={\"k\":null}"})
	require.NoError(t, err)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"A":"flag","B":1,"C":[1],"D":3,"E":true,"F":"x=y","G":"s","H":"","I":{"k":null}}`, string(b))

	for _, bad := range []struct {
		json   string
		params []string
		want   string
	}{
		{`[1]`, nil, "--params-json must be a JSON object"},
		{`{`, nil, "--params-json must be a JSON object"},
		{"", []string{"novalue"}, `want Name=value or Name:=JSON`},
		{"", []string{"=x"}, `want Name=value or Name:=JSON`},
		{"", []string{"N:=nope"}, "the value after := must be JSON"},
	} {
		_, err := parseParams(bad.json, bad.params)
		require.ErrorContains(t, err, bad.want)
	}
}

// The retrieval line says plainly when search is degraded, and why.
func TestRetrievalLine(t *testing.T) {
	require.Equal(t, "retrieval: hybrid", (&retrieval{Mode: "hybrid"}).describe())
	require.Equal(t, "retrieval: lexical — DEGRADED: embedding provider unavailable: 503",
		(&retrieval{Mode: "lexical", Degraded: true, Reason: "embedding provider\nunavailable: 503"}).describe())
	require.Equal(t, "retrieval: not reported", (*retrieval)(nil).describe())
}

// The progress lines of a non-terminal: one per step, none on small runs.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, 250, "prompt")
	for i := 1; i <= 250; i++ {
		p.published(i)
	}
	p.waiting(0)
	for i := 0; i <= 250; i += 50 {
		p.answered(i)
	}
	p.done()
	require.Equal(t, "publishing 250 prompts ...\n  100/250 published\n  200/250 published\nwaiting for the indexer's answers (up to 0s) ...\n  100/250 answered\n  200/250 answered\n", buf.String())
}
