package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Assertion is one declarative check of a trial's response, with
// promptfoo's name and meaning so that suites can be brought over: type,
// value, threshold, weight (default 1). Any text check may be negated with
// a not- prefix (not-contains, not-regex, ...).
type Assertion struct {
	Type      string          `json:"type"`
	Value     json.RawMessage `json:"value,omitempty"`
	Threshold *float64        `json:"threshold,omitempty"`
	Weight    *float64        `json:"weight,omitempty"`
}

// AssertionTypes lists the assertion types the lab supports (each text
// check also as not-<type>). tokens is agentq's own: total tokens of the
// trial at most threshold.
var AssertionTypes = []string{
	"equals", "contains", "icontains", "contains-any", "icontains-any", "contains-all", "icontains-all",
	"starts-with", "regex", "is-json", "contains-json", "levenshtein", "latency", "cost", "tokens",
}

// measured are the assertions about the call rather than its text; they
// cannot be negated.
var measured = []string{"latency", "cost", "tokens"}

// defaultLevenshtein is promptfoo's default threshold of levenshtein.
const defaultLevenshtein = 5

// Prices are what the model's tokens cost, for cost assertions, in US
// dollars per million tokens.
type Prices struct {
	PromptPerMillion     float64 `json:"prompt_per_million"`
	CompletionPerMillion float64 `json:"completion_per_million"`
}

// check is a compiled assertion.
type check struct {
	name      string // as written, e.g. not-contains
	typ       string // without not-
	negate    bool
	weight    float64
	text      string
	list      []string
	value     any // equals against a JSON value
	re        *regexp.Regexp
	schema    *jsonschema.Schema
	threshold float64
}

// observed is what assertions look at.
type observed struct {
	response                 string
	latencyMs                float64
	promptTokens, completion int
	prices                   *Prices
}

// compileAssertions checks and compiles as; the error names the first
// assertion that cannot be used, for a person to fix.
func compileAssertions(as []Assertion, prices *Prices, where string) ([]check, error) {
	out := make([]check, 0, len(as))
	for i, a := range as {
		c, err := compileAssertion(a, prices)
		if err != nil {
			return nil, fmt.Errorf("%s assertion %d (%s): %w", where, i+1, a.Type, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func compileAssertion(a Assertion, prices *Prices) (check, error) {
	c := check{name: a.Type, typ: a.Type, weight: 1}
	if t, ok := strings.CutPrefix(a.Type, "not-"); ok {
		c.typ, c.negate = t, true
	}
	if !slices.Contains(AssertionTypes, c.typ) {
		return c, fmt.Errorf("unsupported assertion type %q; supported: %s (text checks also as not-<type>)", a.Type, strings.Join(AssertionTypes, ", "))
	}
	if c.negate && slices.Contains(measured, c.typ) {
		return c, fmt.Errorf("%s cannot be negated", c.typ)
	}
	if a.Weight != nil {
		if *a.Weight < 0 {
			return c, fmt.Errorf("weight %v must not be negative", *a.Weight)
		}
		c.weight = *a.Weight
	}
	needText := func() error {
		if err := json.Unmarshal(a.Value, &c.text); err != nil || len(a.Value) == 0 {
			return fmt.Errorf("value must be a string")
		}
		return nil
	}
	needThreshold := func(what string) error {
		if a.Threshold == nil || *a.Threshold < 0 {
			return fmt.Errorf("threshold (%s, 0 or more) is required", what)
		}
		c.threshold = *a.Threshold
		return nil
	}
	switch c.typ {
	case "equals":
		if len(a.Value) == 0 {
			return c, fmt.Errorf("value is required")
		}
		if err := json.Unmarshal(a.Value, &c.text); err != nil {
			// An object, array or number: compared with the response as JSON.
			if err := json.Unmarshal(a.Value, &c.value); err != nil {
				return c, fmt.Errorf("value: %w", err)
			}
		}
	case "contains", "icontains", "starts-with":
		if err := needText(); err != nil {
			return c, err
		}
	case "contains-any", "icontains-any", "contains-all", "icontains-all":
		if err := json.Unmarshal(a.Value, &c.list); err != nil {
			// promptfoo also takes one comma-separated string.
			var s string
			if err := json.Unmarshal(a.Value, &s); err != nil || strings.TrimSpace(s) == "" {
				return c, fmt.Errorf("value must be a list of strings or a comma-separated string")
			}
			for _, p := range strings.Split(s, ",") {
				c.list = append(c.list, strings.TrimSpace(p))
			}
		}
		if len(c.list) == 0 {
			return c, fmt.Errorf("value lists no strings")
		}
	case "regex":
		if err := needText(); err != nil {
			return c, err
		}
		re, err := regexp.Compile(c.text)
		if err != nil {
			return c, fmt.Errorf("value is not a regular expression Go accepts (RE2: no lookaround or backreferences): %w", err)
		}
		c.re = re
	case "is-json", "contains-json":
		if len(a.Value) > 0 && !bytes.Equal(bytes.TrimSpace(a.Value), []byte("null")) {
			s, err := compileSchema(a.Value)
			if err != nil {
				return c, fmt.Errorf("value is not a usable JSON Schema: %w", err)
			}
			c.schema = s
		}
	case "levenshtein":
		if err := needText(); err != nil {
			return c, err
		}
		c.threshold = defaultLevenshtein
		if a.Threshold != nil {
			if *a.Threshold < 0 {
				return c, fmt.Errorf("threshold %v must not be negative", *a.Threshold)
			}
			c.threshold = *a.Threshold
		}
	case "latency":
		if err := needThreshold("milliseconds"); err != nil {
			return c, err
		}
	case "cost":
		if err := needThreshold("US dollars"); err != nil {
			return c, err
		}
		if prices == nil {
			return c, fmt.Errorf("cost needs the model's prices: give evaluation.prices {prompt_per_million, completion_per_million}")
		}
	case "tokens":
		if err := needThreshold("tokens"); err != nil {
			return c, err
		}
	}
	return c, nil
}

// eval runs c against o; reason says what failed.
func (c check) eval(o observed) (bool, string) {
	pass, why := c.test(o)
	if c.negate {
		if pass {
			return false, c.name + ": the response " + strings.TrimPrefix(why, "the response ")
		}
		return true, ""
	}
	if pass {
		return true, ""
	}
	return false, c.name + ": " + why
}

// test is the check without negation; why describes the outcome either
// way, for the negated form's reason.
func (c check) test(o observed) (bool, string) {
	r := o.response
	fold := strings.HasPrefix(c.typ, "i")
	has := func(s string) bool {
		if fold {
			return strings.Contains(strings.ToLower(r), strings.ToLower(s))
		}
		return strings.Contains(r, s)
	}
	switch c.typ {
	case "equals":
		if c.value != nil {
			var got any
			if err := json.Unmarshal([]byte(strings.TrimSpace(r)), &got); err != nil {
				return false, "the response is not JSON"
			}
			return reflect.DeepEqual(normalise(got), normalise(c.value)), "the response's JSON equals the value"
		}
		return r == c.text, fmt.Sprintf("the response equals %q", clip(c.text))
	case "contains", "icontains":
		return has(c.text), fmt.Sprintf("the response contains %q", clip(c.text))
	case "contains-any", "icontains-any":
		for _, s := range c.list {
			if has(s) {
				return true, fmt.Sprintf("the response contains %q", clip(s))
			}
		}
		return false, fmt.Sprintf("the response contains none of %q", c.list)
	case "contains-all", "icontains-all":
		for _, s := range c.list {
			if !has(s) {
				return false, fmt.Sprintf("the response lacks %q", clip(s))
			}
		}
		return true, "the response contains all of the values"
	case "starts-with":
		return strings.HasPrefix(r, c.text), fmt.Sprintf("the response starts with %q", clip(c.text))
	case "regex":
		return c.re.MatchString(r), fmt.Sprintf("the response matches /%s/", clip(c.text))
	case "is-json":
		v, ok := wholeJSON(r)
		if !ok {
			return false, "the response is not JSON"
		}
		if c.schema != nil {
			if err := c.schema.Validate(v); err != nil {
				return false, "the response's JSON does not match the schema: " + firstLine(err)
			}
		}
		return true, "the response is JSON"
	case "contains-json":
		found := embeddedJSON(r)
		if len(found) == 0 {
			return false, "the response holds no JSON"
		}
		if c.schema == nil {
			return true, "the response holds JSON"
		}
		var last error
		for _, v := range found {
			if last = c.schema.Validate(v); last == nil {
				return true, "the response holds JSON matching the schema"
			}
		}
		return false, "no JSON in the response matches the schema: " + firstLine(last)
	case "levenshtein":
		d := levenshtein(r, c.text)
		return float64(d) <= c.threshold, fmt.Sprintf("the response is %d edits from the value (at most %g allowed)", d, c.threshold)
	case "latency":
		return o.latencyMs <= c.threshold, fmt.Sprintf("latency %.0f ms (at most %g allowed)", o.latencyMs, c.threshold)
	case "cost":
		cost := (float64(o.promptTokens)*o.prices.PromptPerMillion + float64(o.completion)*o.prices.CompletionPerMillion) / 1e6
		return cost <= c.threshold, fmt.Sprintf("cost $%.6f (at most $%g allowed)", cost, c.threshold)
	case "tokens":
		n := o.promptTokens + o.completion
		return float64(n) <= c.threshold, fmt.Sprintf("%d tokens (at most %g allowed)", n, c.threshold)
	}
	return false, "unknown assertion"
}

// normalise makes JSON numbers comparable whatever their Go type.
func normalise(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// wholeJSON parses the response as one JSON value, tolerating a ```json
// fence around it, as models often write.
func wholeJSON(s string) (any, bool) {
	s = unfence(strings.TrimSpace(s))
	if s == "" {
		return nil, false
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	if _, err := dec.Token(); err == nil {
		return nil, false // trailing text
	}
	return v, true
}

// unfence strips one Markdown code fence around s, if it has one.
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	body := strings.TrimSuffix(s[3:], "```")
	if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(body[:nl], "{[") {
		body = body[nl+1:] // the info string, e.g. json
	}
	return strings.TrimSpace(body)
}

// maxEmbedded bounds the JSON values contains-json looks for.
const maxEmbedded = 32

// embeddedJSON finds the JSON objects and arrays written in s, in order.
func embeddedJSON(s string) []any {
	var out []any
	for i, tried := 0, 0; i < len(s) && tried < 4*maxEmbedded && len(out) < maxEmbedded; tried++ {
		j := strings.IndexAny(s[i:], "{[")
		if j < 0 {
			break
		}
		start := i + j
		dec := json.NewDecoder(strings.NewReader(s[start:]))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			out = append(out, v)
			i = start + int(dec.InputOffset())
			continue
		}
		i = start + 1
	}
	return out
}

// compileSchema compiles a JSON Schema given inline. Its error is one
// line, for a rejection's reason.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	oneLine := func(err error) error {
		return errors.New(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, oneLine(err)
	}
	c := jsonschema.NewCompiler()
	const url = "inline://response-schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, oneLine(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, oneLine(err)
	}
	return s, nil
}

// maxEditCells bounds levenshtein's work (a 7,000-rune response against a
// 7,000-rune value).
const maxEditCells = 50_000_000

// levenshtein is the edit distance between a and b, in runes.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra)*len(rb) > maxEditCells {
		// Too long to compare at this cost: as far apart as can be.
		return max(len(ra), len(rb))
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// clip shortens s for a reason line.
func clip(s string) string {
	const n = 60
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

func firstLine(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clip(s)
}
