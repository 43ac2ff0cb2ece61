package lab

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentq/agentq/internal/report"
)

// TierResult is one evaluation tier's verdict on a trial.
type TierResult struct {
	Tier   report.Tier `json:"tier"`
	Pass   bool        `json:"pass"`
	Score  float64     `json:"score"` // 0 (worst) to 1 (best)
	Reason string      `json:"reason,omitempty"`
	// Placeholder is set when the LLM judge did not really judge:
	// PlaceholderBudget or PlaceholderError. Its verdict is then neutral.
	Placeholder string `json:"placeholder,omitempty"`
}

// Response formats the structural tier checks for.
const (
	// FormatAuto is the default tier 1: JSON matching the schema scores 1,
	// plain text 0.5 (a pass), JSON not matching it 0.3 (a fail). The schema
	// is the request's, else the version's, else the built-in shape.
	FormatAuto = "auto"
	// FormatText passes any non-empty response.
	FormatText = "text"
	// FormatJSON wants JSON (an object or array), matching the schema when
	// one is given.
	FormatJSON = "json"
	// FormatJSONSchema wants JSON matching the schema, which is required.
	FormatJSONSchema = "json_schema"
)

// Structural scores of FormatAuto.
const (
	scoreShaped    = 1.0
	scorePlainText = 0.5
	scoreMisshaped = 0.3
)

// builtinShape is FormatAuto's response shape when none is given: a type
// among the agent's kinds, and a message (a summary for briefings). It is
// one ready-made schema; a request or a version may give its own.
const builtinShape = `{
  "type": "object",
  "required": ["type"],
  "properties": {"type": {"enum": ["answer", "error", "action", "briefing", "clarification", "search"]}},
  "if": {"properties": {"type": {"const": "briefing"}}},
  "then": {"anyOf": [{"required": ["message"]}, {"required": ["summary"]}]},
  "else": {"required": ["message"]}
}`

var builtinSchema = sync.OnceValue(func() *jsonschema.Schema {
	s, err := compileSchema(json.RawMessage(builtinShape))
	if err != nil {
		panic(err) // a constant: the tests compile it
	}
	return s
})

// structural is a compiled tier-1 configuration.
type structural struct {
	format string
	schema *jsonschema.Schema // nil: none (auto falls back to the built-in shape)
}

// eval is tier 1 on a response.
func (s structural) eval(resp string) TierResult {
	r := TierResult{Tier: report.TierStructural}
	v, isJSON := wholeJSON(resp)
	if isJSON {
		switch v.(type) {
		case map[string]any, []any:
		default:
			isJSON = false // a bare number or string is text that happens to parse
		}
	}
	matches := func(schema *jsonschema.Schema) (bool, string) {
		if err := schema.Validate(v); err != nil {
			return false, "JSON not matching the schema: " + firstLine(err)
		}
		return true, ""
	}
	switch s.format {
	case FormatText:
		if strings.TrimSpace(resp) == "" {
			r.Reason = "empty response"
			return r
		}
		r.Pass, r.Score = true, 1
	case FormatJSON, FormatJSONSchema:
		if !isJSON {
			r.Reason = "not JSON"
			return r
		}
		r.Pass, r.Score = true, scoreShaped
		if s.schema != nil {
			if ok, why := matches(s.schema); !ok {
				r.Pass, r.Score, r.Reason = false, scoreMisshaped, why
			}
		}
	default: // FormatAuto
		if !isJSON {
			r.Pass, r.Score, r.Reason = true, scorePlainText, "plain text"
			return r
		}
		schema := s.schema
		if schema == nil {
			schema = builtinSchema()
		}
		r.Pass, r.Score = true, scoreShaped
		if ok, why := matches(schema); !ok {
			r.Pass, r.Score, r.Reason = false, scoreMisshaped, why
		}
	}
	return r
}

// confirmation is a phrase that confirms a mutation (the second built-in rule).
var confirmation = regexp.MustCompile(`(?i)\b(done|complete[d]?|success(ful|fully)?|succeeded|created|updated|deleted|removed|saved|confirmed|applied|scheduled|sent|added|changed|cancell?ed)\b`)

// questionOnly is a message that only asks (the fourth built-in rule): no
// sentence ends in anything but a question mark.
var questionOnly = regexp.MustCompile(`^[^.!]*\?$`)

// The built-in rules' thresholds, in characters.
const (
	minAnswerChars = 50
	minErrorChars  = 20
)

// builtinRules returns the four built-in rules that apply to resp for a
// query of intent: only a JSON object with a type (the built-in shape) has
// them.
func builtinRules(resp, intent string) []ruleOutcome {
	v, ok := wholeJSON(resp)
	if !ok {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	typ, _ := obj["type"].(string)
	if typ == "" {
		return nil
	}
	msg, _ := obj["message"].(string)
	n := utf8.RuneCountInString(strings.TrimSpace(msg))
	intent = strings.ToLower(strings.TrimSpace(intent))
	var out []ruleOutcome
	if intent == "search" && typ == "answer" {
		o := ruleOutcome{name: "short_answer", weight: 1, pass: n >= minAnswerChars}
		if !o.pass {
			o.reason = fmt.Sprintf("short_answer: a search answer of %d characters (at least %d wanted)", n, minAnswerChars)
		}
		out = append(out, o)
	}
	if success, _ := obj["success"].(bool); intent == "mutation" && success {
		o := ruleOutcome{name: "action_confirmation", weight: 1, pass: confirmation.MatchString(msg)}
		if !o.pass {
			o.reason = "action_confirmation: a successful mutation without a confirmation"
		}
		out = append(out, o)
	}
	if typ == "error" {
		suggestions, _ := obj["suggestions"].([]any)
		o := ruleOutcome{name: "error_quality", weight: 1, pass: len(suggestions) > 0 || n >= minErrorChars}
		if !o.pass {
			o.reason = fmt.Sprintf("error_quality: an error with no suggestions and a message of %d characters (at least %d wanted)", n, minErrorChars)
		}
		out = append(out, o)
	}
	if typ == "clarification" {
		o := ruleOutcome{name: "clarification_only", weight: 1, pass: !questionOnly.MatchString(strings.TrimSpace(msg))}
		if !o.pass {
			o.reason = "clarification_only: a clarification that only asks a question"
		}
		out = append(out, o)
	}
	return out
}

// ruleOutcome is one rule's or assertion's verdict.
type ruleOutcome struct {
	name   string
	weight float64
	pass   bool
	reason string
}

// rulesTier is tier 2: the built-in rules that apply, then the assertions.
// As in promptfoo, the score is the weighted share of what passed; the
// tier passes when every rule and assertion of positive weight passes, or,
// when threshold is set, when the score reaches it. Weight 0 records an
// assertion without counting it. Nothing to check passes with score 1.
func rulesTier(o observed, intent string, checks []check, threshold *float64) TierResult {
	outcomes := builtinRules(o.response, intent)
	for _, c := range checks {
		pass, why := c.eval(o)
		outcomes = append(outcomes, ruleOutcome{name: c.name, weight: c.weight, pass: pass, reason: why})
	}
	r := TierResult{Tier: report.TierRules, Pass: true, Score: 1}
	var total, got float64
	var failed []string
	for _, oc := range outcomes {
		if oc.weight == 0 {
			continue
		}
		total += oc.weight
		if oc.pass {
			got += oc.weight
		} else {
			r.Pass = false
			failed = append(failed, oc.reason)
		}
	}
	if total > 0 {
		r.Score = got / total
	}
	if threshold != nil {
		r.Pass = r.Score >= *threshold
		if r.Pass {
			failed = nil
		} else if len(failed) == 0 {
			failed = append(failed, fmt.Sprintf("score %.2f under the threshold %g", r.Score, *threshold))
		}
	}
	r.Reason = strings.Join(failed, "; ")
	return r
}
