package library

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"text/template/parse"
)

// ErrTemplate is wrapped by CheckTemplate's errors: content that does not
// parse, or parameters that do not match their declarations.
var ErrTemplate = errors.New("invalid template")

// ErrParams is wrapped by Render's errors about the values given: missing,
// extra or of the wrong type.
var ErrParams = errors.New("invalid parameters")

// CheckTemplate verifies that content parses as a Go text/template within
// the subset prompts may use (subset.go: no {{define}}, {{block}} or
// {{template}}; {{range N}} up to MaxRangeCount and outside other ranges;
// a range inside a range only over the outer element's parts; printf
// widths and precisions up to MaxFormatWidth), that every parameter it
// uses is declared in params, and that every required declared parameter
// is used. Parameter names must be unique.
func CheckTemplate(content string, params []Param) error {
	declared := map[string]Param{}
	for _, p := range params {
		if p.Name == "" {
			return fmt.Errorf("%w: a parameter has no name", ErrTemplate)
		}
		if _, dup := declared[p.Name]; dup {
			return fmt.Errorf("%w: parameter %q declared twice", ErrTemplate, p.Name)
		}
		if !validParamType(p.Type) {
			return fmt.Errorf("%w: parameter %q has unknown type %q (string, number, integer, boolean, array, object)", ErrTemplate, p.Name, p.Type)
		}
		if p.Default != nil {
			if err := checkType(p, p.Default); err != nil {
				return fmt.Errorf("%w: default of %w", ErrTemplate, err)
			}
		}
		declared[p.Name] = p
	}
	trees, err := parse.Parse("prompt", content, "", "", builtins)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	if len(trees) > 1 {
		return fmt.Errorf("%w: {{template}}, {{define}} and {{block}} are not supported in prompts", ErrTemplate)
	}
	c := newChecker()
	c.list(trees["prompt"].Root, c.vars[0]["$"])
	if c.err != nil {
		return c.err
	}
	used := sortedKeys(c.used)
	var undeclared []string
	for _, u := range used {
		if _, ok := declared[u]; !ok {
			undeclared = append(undeclared, u)
		}
	}
	if len(undeclared) > 0 {
		return fmt.Errorf("%w: content uses undeclared parameter(s) %s", ErrTemplate, strings.Join(undeclared, ", "))
	}
	usedSet := map[string]bool{}
	for _, u := range used {
		usedSet[u] = true
	}
	var unused []string
	for _, p := range params {
		if p.Required && !usedSet[p.Name] {
			unused = append(unused, p.Name)
		}
	}
	if len(unused) > 0 {
		return fmt.Errorf("%w: required parameter(s) %s declared but not used in the content", ErrTemplate, strings.Join(unused, ", "))
	}
	return nil
}

// UsedParams returns the sorted names of the parameters content refers to:
// {{.Name}} where dot is the parameters, {{$.Name}} anywhere, fields of a
// variable or a dot that holds the parameters ({{$p := .}}{{$p.Name}},
// {{with $}}{{.Name}}{{end}}), and {{index . "Name"}}.
func UsedParams(content string) ([]string, error) {
	trees, err := parse.Parse("prompt", content, "", "", builtins)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	c := newChecker()
	for _, t := range trees {
		c.list(t.Root, c.vars[0]["$"])
	}
	return sortedKeys(c.used), nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// builtins are text/template's predefined functions, which parse needs to
// know by name.
var builtins = map[string]any{
	"and": true, "call": true, "html": true, "index": true, "slice": true, "js": true, "len": true,
	"not": true, "or": true, "print": true, "printf": true, "println": true, "urlquery": true,
	"eq": true, "ge": true, "gt": true, "le": true, "lt": true, "ne": true,
}

// renderData is the template's data: values checked against params, and
// the defaults.
func renderData(params []Param, values map[string]any) (map[string]any, error) {
	declared := map[string]Param{}
	for _, p := range params {
		declared[p.Name] = p
	}
	var extra []string
	for k := range values {
		if _, ok := declared[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("%w: unknown parameter(s) %s", ErrParams, strings.Join(extra, ", "))
	}
	data := make(map[string]any, len(params))
	var missing []string
	for _, p := range params {
		v, ok := values[p.Name]
		if !ok {
			if p.Default != nil {
				data[p.Name] = p.Default
				continue
			}
			if p.Required {
				missing = append(missing, p.Name)
			}
			// Optional without default: present and empty, so
			// {{if .X}} works and missingkey=error does not fire.
			data[p.Name] = nil
			continue
		}
		if err := checkType(p, v); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrParams, err)
		}
		data[p.Name] = v
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing required parameter(s) %s", ErrParams, strings.Join(missing, ", "))
	}
	return data, nil
}

func validParamType(t string) bool {
	switch t {
	case "", "string", "number", "integer", "boolean", "array", "object":
		return true
	}
	return false
}

// checkType checks a JSON-decoded value against p's declared type.
func checkType(p Param, v any) error {
	ok := true
	switch p.Type {
	case "":
	case "string":
		_, ok = v.(string)
	case "boolean":
		_, ok = v.(bool)
	case "number":
		ok = isNumber(v)
	case "integer":
		ok = isNumber(v)
		if ok {
			f, _ := toFloat(v)
			ok = f == math.Trunc(f)
		}
	case "array":
		_, ok = v.([]any)
	case "object":
		_, ok = v.(map[string]any)
	}
	if !ok {
		return fmt.Errorf("parameter %q must be %s, got %s", p.Name, article(p.Type), describe(v))
	}
	return nil
}

func isNumber(v any) bool { _, ok := toFloat(v); return ok }

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	}
	return "a " + t
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	if isNumber(v) {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
