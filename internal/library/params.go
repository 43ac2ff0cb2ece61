package library

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// ParamDiff is the first difference between two parameter declarations of
// one version: the one stored and the one a create gives.
type ParamDiff struct {
	// Param is the parameter's name.
	Param string
	// Field is "type", "required", "default" or "description"; "declared"
	// when only one of the two declarations has the parameter.
	Field string
	// Stored and Given are the field's values, as JSON cut to a few dozen
	// characters ("none": not set); for "declared", whether each has it.
	Stored, Given string
}

// String says the difference in a sentence.
func (d ParamDiff) String() string {
	if d.Field == "declared" {
		if d.Given == "none" {
			return fmt.Sprintf("parameter %q is declared in the stored version, not here", d.Param)
		}
		return fmt.Sprintf("parameter %q is declared here, not in the stored version", d.Param)
	}
	return fmt.Sprintf("parameter %q differs in %s: %s stored, %s given", d.Param, d.Field, d.Stored, d.Given)
}

// DiffParams compares two declarations by what they mean and returns the
// first difference; ok is false when they declare the same.
//
// Parameters are matched by name, so their order in the list does not
// matter (a template and a rendering look them up by name). A field left
// out is its zero value (type "", required false, description ""), and a
// null default is no default: both are stored as nothing. Defaults compare
// as JSON values: key order, spacing and number notation do not matter
// (numbers compare as the float64 they are decoded and stored as).
//
// "First" is in the given declaration's order, fields in the order type,
// required, default, description; then the stored parameters the given
// declaration leaves out, in their order.
func DiffParams(stored, given []Param) (ParamDiff, bool) {
	byName := make(map[string]Param, len(stored))
	for _, p := range stored {
		byName[p.Name] = p
	}
	seen := make(map[string]bool, len(given))
	for _, g := range given {
		seen[g.Name] = true
		s, ok := byName[g.Name]
		if !ok {
			return ParamDiff{Param: g.Name, Field: "declared", Stored: "none", Given: "declared"}, true
		}
		for _, f := range []struct {
			name   string
			s, g   any
			absent any
		}{
			{"type", s.Type, g.Type, ""},
			{"required", s.Required, g.Required, nil},
			{"default", s.Default, g.Default, nil},
			{"description", s.Description, g.Description, ""},
		} {
			a, b := canonical(f.s), canonical(f.g)
			if a != b {
				return ParamDiff{Param: g.Name, Field: f.name, Stored: shown(f.s, a, f.absent), Given: shown(f.g, b, f.absent)}, true
			}
		}
	}
	for _, s := range stored {
		if !seen[s.Name] {
			return ParamDiff{Param: s.Name, Field: "declared", Stored: "declared", Given: "none"}, true
		}
	}
	return ParamDiff{}, false
}

// canonical is v's JSON with object keys sorted (encoding/json sorts map
// keys) and nothing escaped that need not be; "" for nil.
func canonical(v any) string {
	if v == nil {
		return ""
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		// Values decoded from JSON always encode; should one not, it
		// still compares as itself.
		return fmt.Sprintf("%#v", v)
	}
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}

// shown is a value as a reason says it: "none" when it is absent (nil, or
// the field's zero value that stands for not set), else its JSON cut to
// maxShown bytes, so a reason stays short whatever a description or a
// default holds.
func shown(v any, js string, absent any) string {
	if v == nil || (absent != nil && v == absent) {
		return "none"
	}
	const maxShown = 80
	if len(js) <= maxShown {
		return js
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(js[cut]) {
		cut--
	}
	return js[:cut] + "…"
}
