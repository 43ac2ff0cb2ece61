package library_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
)

func TestDiffParams(t *testing.T) {
	// decl decodes a declaration as the indexer does (defaults as any).
	decl := func(raw string) []library.Param {
		var ps []library.Param
		require.NoError(t, json.Unmarshal([]byte(raw), &ps), raw)
		return ps
	}
	const base = `[{"name":"A","type":"string","default":"x","description":"first"},{"name":"B","type":"object","required":true,"default":{"k":[1,2],"j":null}}]`
	long := strings.Repeat("é", 100)
	for _, c := range []struct {
		name          string
		stored, given string
		want          library.ParamDiff // zero: the same
		says          string
	}{
		{name: "identical", stored: base, given: base},
		{name: "keys, spaces and parameter order", stored: base,
			given: "[ {\"default\": {\"j\": null, \"k\": [1, 2]}, \"required\": true, \"type\": \"object\", \"name\": \"B\"},\n\t{\"description\": \"first\", \"default\": \"x\", \"type\": \"string\", \"name\": \"A\"} ]"},
		{name: "zero values written out, null default", stored: `[{"name":"A"}]`, given: `[{"name":"A","type":"","required":false,"default":null,"description":""}]`},
		{name: "number notation", stored: `[{"name":"N","default":10}]`, given: `[{"name":"N","default":1.0e1}]`},
		{name: "no parameters either way", stored: `[]`, given: `null`},

		{name: "type", stored: base, given: `[{"name":"A","type":"number","default":"x","description":"first"},{"name":"B","type":"object","required":true,"default":{"k":[1,2],"j":null}}]`,
			want: library.ParamDiff{Param: "A", Field: "type", Stored: `"string"`, Given: `"number"`}, says: `parameter "A" differs in type: "string" stored, "number" given`},
		{name: "required", stored: base, given: `[{"name":"A","type":"string","default":"x","description":"first"},{"name":"B","type":"object","default":{"k":[1,2],"j":null}}]`,
			want: library.ParamDiff{Param: "B", Field: "required", Stored: "true", Given: "false"}, says: `parameter "B" differs in required: true stored, false given`},
		{name: "default inside an array", stored: base, given: `[{"name":"A","type":"string","default":"x","description":"first"},{"name":"B","type":"object","required":true,"default":{"k":[2,1],"j":null}}]`,
			want: library.ParamDiff{Param: "B", Field: "default", Stored: `{"j":null,"k":[1,2]}`, Given: `{"j":null,"k":[2,1]}`}},
		{name: "a string default is not a number", stored: `[{"name":"N","default":1}]`, given: `[{"name":"N","default":"1"}]`,
			want: library.ParamDiff{Param: "N", Field: "default", Stored: `1`, Given: `"1"`}},
		{name: "default set", stored: `[{"name":"N"}]`, given: `[{"name":"N","default":false}]`,
			want: library.ParamDiff{Param: "N", Field: "default", Stored: "none", Given: "false"}, says: `parameter "N" differs in default: none stored, false given`},
		{name: "description, shown as written", stored: `[{"name":"N","description":"a <b> & c"}]`, given: `[{"name":"N"}]`,
			want: library.ParamDiff{Param: "N", Field: "description", Stored: `"a <b> & c"`, Given: "none"}},
		{name: "a long value is cut", stored: `[{"name":"N","description":"` + long + `"}]`, given: `[{"name":"N","description":"` + long + `!"}]`,
			want: library.ParamDiff{Param: "N", Field: "description", Stored: `"` + strings.Repeat("é", 39) + "…", Given: `"` + strings.Repeat("é", 39) + "…"}},
		{name: "added", stored: `[{"name":"A"}]`, given: `[{"name":"A"},{"name":"Z"}]`,
			want: library.ParamDiff{Param: "Z", Field: "declared", Stored: "none", Given: "declared"}, says: `parameter "Z" is declared here, not in the stored version`},
		{name: "removed", stored: `[{"name":"A"},{"name":"Z"}]`, given: `[{"name":"A"}]`,
			want: library.ParamDiff{Param: "Z", Field: "declared", Stored: "declared", Given: "none"}, says: `parameter "Z" is declared in the stored version, not here`},
		{name: "the first in the given order", stored: `[{"name":"A","default":1},{"name":"B","default":1}]`, given: `[{"name":"B","default":2},{"name":"A","default":2}]`,
			want: library.ParamDiff{Param: "B", Field: "default", Stored: "1", Given: "2"}},
		{name: "a changed field before a removed parameter", stored: `[{"name":"A"},{"name":"B"}]`, given: `[{"name":"B","type":"string"}]`,
			want: library.ParamDiff{Param: "B", Field: "type", Stored: "none", Given: `"string"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, differ := library.DiffParams(decl(c.stored), decl(c.given))
			require.Equal(t, c.want != library.ParamDiff{}, differ)
			require.Equal(t, c.want, got)
			if c.says != "" {
				require.Equal(t, c.says, got.String())
			}
			// Either way round, the same answer to "do they differ".
			_, back := library.DiffParams(decl(c.given), decl(c.stored))
			require.Equal(t, differ, back)
		})
	}
}

// The hash is of the JSON Go's encoding/json writes: it escapes <, > and
// &, and U+2028 and U+2029 too, as \u2028 and \u2029. Another language
// must write the same bytes to get the same hash.
func TestHashEscapesAsEncodingJSON(t *testing.T) {
	written := `{"id":"p","version":1,"content":"a \u003c b \u0026 c \u003e d\u2028e\u2029f","type":"task"}`
	sum := sha256.Sum256([]byte(written))
	require.Equal(t, hex.EncodeToString(sum[:]), library.Hash("p", 1, "a < b & c > d\u2028e\u2029f", "task"))
}
