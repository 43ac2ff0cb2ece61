package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fast path must never disagree with the jsonschema library, the
// reference: when it says pass the library accepts, when it says fail the
// library refuses. These tests run both on the fixtures, on systematic
// mutations of them and, with FuzzFastPath, on fuzzed bytes.

// agree checks the fast path's verdict on data for name against the
// library's.
func agree(t testing.TB, r *Registry, name string, data []byte) verdict {
	t.Helper()
	c := r.schemas[name]
	v := fastCheck(c.fast, data)
	ref := validateSlow(name, c.schema, data)
	switch {
	case v == pass && ref != nil:
		t.Fatalf("%s: fast path accepts what the library refuses (%v): %.400q", name, ref, data)
	case v == fail && ref == nil:
		t.Fatalf("%s: fast path refuses what the library accepts: %.400q", name, data)
	}
	// Validate is fastCheck, then validateSlow unless it passed; checking
	// the whole of it on every input would only double the library's cost.
	if v == pass {
		if err := r.Validate(name, data); err != nil {
			t.Fatalf("%s: Validate refuses what the fast path accepts: %v", name, err)
		}
	}
	return v
}

// TestFastPathDecidesValidInputs: the fast path, not the library, accepts
// every valid fixture and the benchmark's events; otherwise consumers pay
// the library's cost on every event.
func TestFastPathDecidesValidInputs(t *testing.T) {
	r := loadRegistry(t)
	for _, f := range readFixtures(t) {
		if f.valid {
			require.Equal(t, pass, agree(t, r, f.typ, f.data), f.file)
		}
	}
	for _, c := range benchCases(t) {
		require.Equal(t, pass, agree(t, r, c.typ, c.data), c.name)
	}
	for name, c := range r.schemas {
		require.NotNil(t, c.fast, "%s: no fast path", name)
	}
}

// TestFastPathAgreesOnFixtures runs every fixture and every entry of the
// fuzz corpora in testdata/fuzz against every schema, both ways.
func TestFastPathAgreesOnFixtures(t *testing.T) {
	r := loadRegistry(t)
	names := slices.Sorted(maps.Keys(r.schemas))
	var inputs [][]byte
	for _, f := range readFixtures(t) {
		inputs = append(inputs, f.data)
	}
	corpus := readFuzzCorpora(t)
	require.GreaterOrEqual(t, len(corpus), len(validateCorpus))
	inputs = append(inputs, corpus...)
	for _, data := range inputs {
		for _, name := range names {
			agree(t, r, name, data)
		}
	}
}

// readFuzzCorpora returns the []byte values of every file of
// testdata/fuzz/*/ ("go test fuzz v1" format).
func readFuzzCorpora(t testing.TB) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	require.NoError(t, err)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Equal(t, "go test fuzz v1", lines[0], f)
		for _, l := range lines[1:] {
			q, ok := strings.CutPrefix(l, "[]byte(")
			require.True(t, ok, "%s: %s", f, l)
			s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
			require.NoError(t, err, f)
			out = append(out, []byte(s))
		}
	}
	return out
}

// TestFastPathAgreesOnMutations changes each value of each valid fixture
// in turn, to boundary numbers, odd strings and escapes, other types, a
// missing or repeated key, and checks the two verdicts agree.
func TestFastPathAgreesOnMutations(t *testing.T) {
	r := loadRegistry(t)
	decided := 0
	total := 0
	for _, f := range readFixtures(t) {
		if !f.valid {
			continue
		}
		for _, m := range mutations(t, f.data) {
			total++
			if agree(t, r, f.typ, m) != unknown {
				decided++
			}
		}
	}
	t.Logf("%d mutations, %d decided by the fast path", total, decided)
	require.Greater(t, decided, total/2, "the fast path should decide most mutations")
}

// mutationValues are raw JSON texts put in place of a value.
var mutationValues = func() []string {
	vs := []string{
		`null`, `true`, `false`, `[]`, `{}`, `[1]`, `{"a":1}`, `[{"a":1}]`, `["x"]`, `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21]`,
		`-1`, `0`, `-0`, `0.0`, `-0.0`, `1`, `1.0`, `1.00`, `1.5`, `2`, `0.5`, `1e0`, `1E+0`, `1e-1`, `10e-1`, `0e5`,
		`1.00000000000000000001`, `0.99999999999999999999`, `-0.00000000000000000001`, `3`, `20`, `21`, `50`, `51`,
		`100`, `101`, `100000`, `1000000000000000000000`, `2147483648`, `9223372036854775808`, `1e400`, `1e-400`,
		`2.0`, `2.5`, `0.3`, `1e2`,
		`""`, `"a"`, `"tool"`, `"prompt"`, `"up"`, `"down"`, `"llm"`, `"rules"`, `"llm:gpt"`, `"rules:v1"`, `"llm: x"`,
		`"system"`, `"user"`, `"production"`, `"a b"`, `"a/b"`, `"A-Z_.:9"`, `"web_search"`,
		`"agentq.tool.executed.v1"`, `"agentq.Tool.executed.v1"`,
		`"2024-01-01T00:00:00Z"`, `"2024-13-01T00:00:00Z"`, `"2024-01-01 00:00:00"`, `"2024-01-01T00:00:00+01:00"`,
		`"\u0041"`, `"\u0061bc"`, `"\ud800"`, `"\udc00x"`, `"\ud83d\ude00"`, `"\ud800\u0041"`, `"a\nb"`, `"\"quoted\""`,
		`"\/"`, `"\u0000"`, `"tab\there"`, `"t\u006fol"`, `"\u0074ool"`, `"é"`, `"\u00e9"`, `"\u2028"`,
	}
	for _, n := range []int{1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 2000, 2001, 4096, 4097} {
		vs = append(vs, `"`+strings.Repeat("x", n)+`"`, `"`+strings.Repeat("é", n)+`"`)
	}
	vs = append(vs, `"`+strings.Repeat("x", 32768)+`"`, `"`+strings.Repeat("é", 16384)+strings.Repeat("x", 16385)+`"`)
	for _, n := range []int{64, 65, 128, 129} {
		vs = append(vs, `"`+strings.Repeat(`\u0078`, n)+`"`, `"`+strings.Repeat(`\ud83d\ude00`, n)+`"`,
			`"`+strings.Repeat(`\ud800`, n)+`"`)
	}
	return vs
}()

// mutations returns variants of a JSON object: each value (at any depth)
// replaced by each of mutationValues, each member removed, each top-level
// key escaped, repeated with another value before or after it, and an
// unknown key added.
func mutations(t testing.TB, data []byte) [][]byte {
	t.Helper()
	var doc any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	require.NoError(t, d.Decode(&doc))
	const hole = "\x00hole\x00"
	holed := func(root any) []byte {
		b, err := json.Marshal(root)
		require.NoError(t, err)
		return b
	}
	quotedHole := string(holed(hole))

	var out [][]byte
	var walk func(v any, set func(any), del func())
	walk = func(v any, set func(any), del func()) {
		set(hole)
		b := holed(doc)
		for _, mv := range mutationValues {
			out = append(out, bytes.Replace(b, []byte(quotedHole), []byte(mv), 1))
		}
		set(v)
		if del != nil {
			del()
			out = append(out, holed(doc))
			set(v)
		}
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				old := v[k]
				walk(old, func(x any) { v[k] = x }, func() { delete(v, k) })
				v[k] = old
			}
		case []any:
			for i := range v {
				old := v[i]
				walk(old, func(x any) { v[i] = x }, nil)
				v[i] = old
			}
		}
	}
	obj := doc.(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		old := obj[k]
		walk(old, func(x any) { obj[k] = x }, func() { delete(obj, k) })
		obj[k] = old
	}

	// Key-level changes, made on the text of the top-level object.
	base := holed(doc)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		key := string(holed(k))
		escaped := `"\u00` + fmt.Sprintf("%02x", k[0]) + key[2:]
		out = append(out, bytes.Replace(base, []byte(key+":"), []byte(escaped+":"), 1))
		val := string(holed(obj[k]))
		for _, other := range []string{`null`, `"x"`, `-1`, `1.5`, val} {
			out = append(out,
				bytes.Replace(base, []byte("{"), []byte("{"+key+":"+other+","), 1),
				bytes.Replace(base, []byte("{"), []byte("{"+escaped+":"+other+","), 1),
				append(bytes.TrimSuffix(bytes.Clone(base), []byte("}")), []byte(","+key+":"+other+"}")...))
		}
	}
	out = append(out, bytes.Replace(base, []byte("{"), []byte(`{"zz_unknown":[1,{"a":"b"}],`), 1))
	return out
}

// FuzzFastPath runs the fast path and the library on fuzzed data for
// every schema and requires the same verdict whenever the fast path gives
// one, and that Validate answers exactly as the library alone.
func FuzzFastPath(f *testing.F) {
	r := loadRegistry(f)
	names := slices.Sorted(maps.Keys(r.schemas))
	for _, data := range validateCorpus {
		f.Add([]byte(data))
	}
	for _, fx := range readFixtures(f) {
		f.Add(fx.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range names {
			agree(t, r, name, data)
		}
	})
}

// TestClassPatternsMatchRegexp: every pattern of the contract that the fast
// path matches without regexp gives regexp's answer, on every string of
// up to three characters from a mixed alphabet and on strings around each
// length bound.
func TestClassPatternsMatchRegexp(t *testing.T) {
	r := loadRegistry(t)
	patterns := map[string]*fastNode{}
	seen := map[*fastNode]bool{}
	var walk func(n *fastNode)
	walk = func(n *fastNode) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		if n.pattern != nil {
			patterns[n.pattern.String()] = n
		}
		kids := []*fastNode{n.ref, n.not, n.ifNode, n.thenNode, n.elseNode, n.additional, n.items}
		kids = append(kids, n.allOf...)
		kids = append(kids, n.anyOf...)
		kids = append(kids, n.oneOf...)
		kids = append(kids, n.prefixItems...)
		kids = append(kids, slices.Collect(maps.Values(n.props))...)
		kids = append(kids, slices.Collect(maps.Values(n.depSchemas))...)
		for _, k := range kids {
			walk(k)
		}
	}
	for _, c := range r.schemas {
		walk(c.fast)
	}
	require.NotEmpty(t, patterns)

	alphabet := []string{"a", "z", "A", "Z", "0", "9", "_", "-", ".", ":", "/", " ", "é", "\n", "~", "\x00"}
	var inputs []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		inputs = append(inputs, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+c, n-1)
		}
	}
	gen("", 3)
	for _, n := range []int{1, 2, 62, 63, 64, 65, 127, 128, 129, 255, 256, 257} {
		for _, c := range []string{"a", "A", "0", "_", "-", ".", ":"} {
			inputs = append(inputs, strings.Repeat(c, n), "a"+strings.Repeat(c, n), strings.Repeat(c, n)+"\n")
		}
	}
	for expr, n := range patterns {
		if strings.HasPrefix(expr, "^[") {
			require.NotNil(t, n.classes, "%s: a name pattern should not need regexp", expr)
		}
		if n.classes == nil {
			continue
		}
		for _, s := range inputs {
			require.Equal(t, n.pattern.MatchString(s), n.classes.match([]byte(s)), "%s on %q", expr, s)
		}
	}

	// Shapes greedy matching would get wrong are left to regexp.
	for _, expr := range []string{`^[a-z]*[a-z]$`, `^[a-z]{0,3}[0-9]?$`, `^a|b$`, `^[a-z]+`, `[a-z]+$`, `^\S+$`, `^(?i)a$`, `^(ab)+$`} {
		assert.Nil(t, compilePattern(expr), expr)
	}
	for _, expr := range []string{`^[a-z]{2}[a-z]{0,3}$`, `^[a-z]+[0-9]+$`, `^x[a-z]*$`} {
		assert.NotNil(t, compilePattern(expr), expr)
	}
}
