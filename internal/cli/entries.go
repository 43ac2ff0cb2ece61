package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/schemas"
)

// --- entries: prompts and tools read from files ---

// entry is one prompt or tool definition read from a file.
type entry struct {
	source string         // file name as given, or "stdin"
	index  int            // 1-based position in its source
	line   int            // line in a YAML source; 0 when unknown
	data   map[string]any // JSON-compatible values
	raw    []byte         // data as canonical JSON: keys sorted
}

// where names the entry in messages: "prompts.yaml entry 3 (line 41)".
func (en entry) where() string {
	if en.line > 0 {
		return fmt.Sprintf("%s entry %d (line %d)", en.source, en.index, en.line)
	}
	return fmt.Sprintf("%s entry %d", en.source, en.index)
}

// str returns the string field key, or "".
func (en entry) str(key string) string {
	s, _ := en.data[key].(string)
	return s
}

// loadEntries reads the entries of path: a file, a directory (its *.yaml,
// *.yml and *.json files, sorted by name, not recursing) or "-" for stdin.
func loadEntries(e Env, path string) ([]entry, error) {
	if path == "-" {
		raw, err := io.ReadAll(e.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return parseEntries("stdin", raw, false)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		des, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		files = files[:0]
		for _, de := range des { // sorted by name
			switch strings.ToLower(filepath.Ext(de.Name())) {
			case ".yaml", ".yml", ".json":
				if !de.IsDir() {
					files = append(files, filepath.Join(path, de.Name()))
				}
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml, *.yml or *.json files in the directory", path)
		}
	}
	var all []entry
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ens, err := parseEntries(f, raw, strings.EqualFold(filepath.Ext(f), ".json"))
		if err != nil {
			return nil, err
		}
		all = append(all, ens...)
	}
	return all, nil
}

// parseEntries reads one source: a JSON or YAML value that is one entry (a
// mapping) or a list of them; a YAML source may hold several documents.
func parseEntries(source string, raw []byte, isJSON bool) ([]entry, error) {
	var ens []entry
	add := func(v any, line int) error {
		items := []any{v}
		lines := []int{line}
		if l, ok := v.(listWithLines); ok {
			items, lines = l.items, l.lines
		} else if l, ok := v.([]any); ok {
			items = l
			lines = make([]int, len(l))
		}
		for i, it := range items {
			en := entry{source: source, index: len(ens) + 1, line: lines[i]}
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: want a mapping (an object) with the fields of the definition, got %s", en.where(), kindOf(it))
			}
			b, err := json.Marshal(m) // encoding/json sorts map keys: a canonical form
			if err != nil {
				return fmt.Errorf("%s: %w", en.where(), err)
			}
			en.data, en.raw = m, b
			ens = append(ens, en)
		}
		return nil
	}
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: empty file", source)
			}
			return nil, fmt.Errorf("%s: not valid JSON: %w", source, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: not valid JSON: more data after the first value (a list is written [ ... ])", source)
		}
		if err := add(v, 0); err != nil {
			return nil, err
		}
		return ens, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: not valid YAML: %w", source, err)
		}
		docs++
		if len(doc.Content) == 0 {
			continue // an empty document
		}
		root := doc.Content[0]
		v, err := yamlValue(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if root.Kind == yaml.SequenceNode {
			lines := make([]int, len(root.Content))
			for i, c := range root.Content {
				lines[i] = c.Line
			}
			v = listWithLines{v.([]any), lines}
		}
		if v == nil {
			continue // a document holding only null
		}
		if err := add(v, root.Line); err != nil {
			return nil, err
		}
	}
	if len(ens) == 0 {
		return nil, fmt.Errorf("%s: no definitions in the file", source)
	}
	return ens, nil
}

// listWithLines is a YAML list with the line of each item.
type listWithLines struct {
	items []any
	lines []int
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any, listWithLines:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// yamlValue turns a YAML node into the values encoding/json produces, so a
// YAML file and its JSON equivalent give the same data. Scalars keep their
// text unless they resolve to null, a boolean or a number: an unquoted
// date stays the string it is written as.
func yamlValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlValue(n.Content[0])
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		var merged []map[string]any
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, vn := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				m, err := mergeSources(vn)
				if err != nil {
					return nil, err
				}
				merged = append(merged, m...)
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a mapping key must be a string", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			v, err := yamlValue(vn)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		// Keys written in the mapping win over merged ones, and earlier
		// merge sources over later ones, as YAML's merge key specifies.
		for _, m := range merged {
			for k, v := range m {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
			fallthrough
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
			}
			return f, nil
		default: // !!str, !!timestamp, !!binary, custom tags: the text
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// mergeSources returns the mappings a merge key (<<) refers to.
func mergeSources(n *yaml.Node) ([]map[string]any, error) {
	v, err := yamlValue(n)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case map[string]any:
		return []map[string]any{v}, nil
	case []any:
		out := make([]map[string]any, 0, len(v))
		for _, it := range v {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("line %d: a merge key (<<) takes mappings", n.Line)
			}
			out = append(out, m)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", n.Line)
}

// validateEntries checks every entry against eventType's schema and
// returns one error listing every invalid entry by file and position.
func validateEntries(reg *schemas.Registry, eventType string, ens []entry, label func(entry) string) error {
	var bad []string
	for _, en := range ens {
		if err := reg.Validate(eventType, en.raw); err != nil {
			what := en.where()
			if l := label(en); l != "" {
				what += " " + l
			}
			bad = append(bad, fmt.Sprintf("  %s: %v", what, err))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	noun := "entries are"
	if len(bad) == 1 {
		noun = "entry is"
	}
	return fmt.Errorf("%d %s invalid; nothing was published:\n%s", len(bad), noun, strings.Join(bad, "\n"))
}
