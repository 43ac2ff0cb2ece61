package chat

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Tool describes a tool an agent may call, as a tool server lists it.
type Tool struct {
	// Name is the name the model must use, e.g. "kubernetes.pods_list".
	Name string
	// Description says what the tool does.
	Description string
	// InputSchema is the JSON Schema of the tool's arguments, usually an
	// object schema decoded from JSON. It may be nil or incomplete.
	InputSchema map[string]any
}

// FormatTools describes tools for a prompt that lists them in text (ReAct):
// numbered in the given order, each with its parameters sorted by name and
// marked required or optional, with type, description, default and choices
// when the schema gives them, or "None" when it has no parameters. A line
// looks like "- limit (optional, integer): Maximum hits. [default: 10]";
// testdata/tools.golden shows a full listing.
//
// Names and descriptions come from tool servers and are not fenced, so they
// are put on one line and marker-like text in them is defused as Fence
// does.
//
// Odd schemas are described as far as they go rather than rejected: a
// missing type is left out, a list of types is joined with "|", a property
// whose schema is not an object is listed by name, and a nil schema or one
// whose properties are not an object has no parameters.
func FormatTools(tools []Tool) string {
	if len(tools) == 0 {
		return "No tools available."
	}
	var b strings.Builder
	for i, t := range tools {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%d. **%s**", i+1, inline(t.Name))
		if d := inline(t.Description); d != "" {
			b.WriteString(": ")
			b.WriteString(d)
		}
		b.WriteString("\n")
		params := toolParameters(t.InputSchema)
		if len(params) == 0 {
			b.WriteString("    **Parameters**: None\n")
			continue
		}
		b.WriteString("    **Parameters**:\n")
		for _, p := range params {
			b.WriteString("    - ")
			b.WriteString(p)
			b.WriteString("\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// toolParameters returns one line per property of an object schema.
func toolParameters(schema map[string]any) []string {
	props, ok := schema["properties"].(map[string]any)
	if !ok || len(props) == 0 {
		return nil
	}
	required := map[string]bool{}
	for _, r := range stringList(schema["required"]) {
		required[r] = true
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)

	lines := make([]string, 0, len(names))
	for _, name := range names {
		var b strings.Builder
		b.WriteString(inline(name))
		if required[name] {
			b.WriteString(" (required")
		} else {
			b.WriteString(" (optional")
		}
		prop, _ := props[name].(map[string]any)
		if t := schemaType(prop["type"]); t != "" {
			b.WriteString(", ")
			b.WriteString(t)
		}
		b.WriteString(")")
		if d, ok := prop["description"].(string); ok && strings.TrimSpace(d) != "" {
			b.WriteString(": ")
			b.WriteString(inline(d))
		}
		var hints []string
		if def, ok := prop["default"]; ok {
			hints = append(hints, "default: "+jsonValue(def))
		}
		if enum, ok := prop["enum"]; ok {
			var vals []string
			for _, v := range anyList(enum) {
				vals = append(vals, jsonValue(v))
			}
			hints = append(hints, "choices: ["+strings.Join(vals, ", ")+"]")
		}
		if len(hints) > 0 {
			b.WriteString(" [")
			b.WriteString(strings.Join(hints, "; "))
			b.WriteString("]")
		}
		lines = append(lines, b.String())
	}
	return lines
}

// schemaType renders "type", which JSON Schema allows to be a string or a
// list of strings.
func schemaType(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return strings.Join(stringList(v), "|")
}

// stringList returns the strings in v, which may be []string (schemas built
// in Go) or []any (schemas decoded from JSON).
func stringList(v any) []string {
	var out []string
	for _, e := range anyList(v) {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func anyList(v any) []any {
	switch l := v.(type) {
	case []any:
		return l
	case []string:
		out := make([]any, len(l))
		for i, s := range l {
			out[i] = s
		}
		return out
	}
	return nil
}

// jsonValue renders a schema value as JSON, so strings are quoted and
// numbers are not; values JSON cannot encode fall back to Go syntax.
func jsonValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return strconv.Quote(fmt.Sprint(v))
	}
	return string(b)
}

// oneLine collapses runs of whitespace, newlines included, so a description
// cannot break the list layout.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// inline prepares untrusted text that appears outside a fence, such as tool
// names and descriptions from a tool server: on one line, and unable to
// forge a fence marker.
func inline(s string) string {
	return Neutralize(oneLine(s))
}
