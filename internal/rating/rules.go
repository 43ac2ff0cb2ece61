package rating

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// RulesRater names the rule-based rater in events (the rater field) and
// logs. A change to the rules below that changes any rating must bump it,
// so ratings of different rule sets are never mixed up.
const RulesRater = "rules:v1"

// Rater kinds, the rater_kind field of tool.rated and prompt.rated.
const (
	KindLLM   = "llm"
	KindRules = "rules"
)

// Ratings of rules:v1. Each case sets relevance and correctness; the
// rating is their mean, as for an LLM's answer.
const (
	failedRelevance, failedCorrectness = 0.0, 0.0
	emptyRelevance, emptyCorrectness   = 0.1, 0.5
	errorRelevance, errorCorrectness   = 0.2, 0.1
	echoRelevance, echoCorrectness     = 0.2, 0.4
	plainRelevance, plainCorrectness   = 0.8, 0.8
	// Caps and penalties, applied after the case.
	malformedCorrectness = 0.3 // output opens as JSON but does not parse
	excerptCorrectness   = 0.7 // output_truncated: only an excerpt was seen
	slowPenalty          = 0.1 // latency_ms at or over slowMs
	slowMs               = 30_000
	injectionCap         = 0.5 // instructions aimed at the rater: neither rewarded nor trusted
	// minEcho is the shortest output taken as an echo when it is only
	// contained in the input rather than equal to it: "42" inside a
	// calculator's input is an answer, a sentence copied back is not.
	minEcho = 20
	// errorWindow is how much of the start of an output the error
	// patterns look at: errors announce themselves first.
	errorWindow = 512
)

// errorLike matches outputs that report an error although the call
// succeeded, at the start of the output (case-insensitive): an error or
// exception label, a Python traceback, an HTTP error status, a JSON object
// that opens with an error member, and common system errors.
var errorLike = []*regexp.Regexp{
	regexp.MustCompile(`(?i)^\s*(error|err|fatal|panic|exception|failure|failed)\b\s*[:!\-\]]`),
	regexp.MustCompile(`(?i)^\s*[\w.]*(error|exception)\b\s*:`), // ValueError: ..., java.lang.NullPointerException: ...
	regexp.MustCompile(`(?i)traceback \(most recent call last\)`),
	regexp.MustCompile(`(?i)^\s*(http/\d(\.\d)?\s+|status(\s+code)?\s*[:=]?\s*)[45]\d\d\b`),
	regexp.MustCompile(`(?i)^\s*\{\s*"(error|errors|err)"\s*:\s*(\{|\[\s*[^\]\s]|"|true|[1-9])`), // {"error": {...}}, {"error": "..."}, {"error": true}; not null, false or []
	regexp.MustCompile(`(?i)^\s*(permission denied|access denied|unauthorized|forbidden|internal server error|service unavailable|bad gateway|gateway time-?out|connection refused|request timed out)\b`),
	regexp.MustCompile(`(?i)(no such file or directory|command not found|segmentation fault)`),
}

// Rules rates c with rules:v1, a deterministic heuristic over what the
// event itself shows. It is a real rater with its own name, never
// presented as an LLM's judgement, and it never reads instructions in the
// text it rates. The rules, in order (the first case that applies sets
// relevance and correctness):
//
//   - failed call (success false): 0 and 0, whatever the output;
//   - empty output (only whitespace): relevance 0.1, correctness 0.5;
//   - error-like output (an error label, a traceback, an HTTP 4xx/5xx
//     status, a JSON error object, a system error at its start):
//     relevance 0.2, correctness 0.1;
//   - an output that merely echoes the input (equal to it, or to its string
//     values, after case, punctuation and spacing are ignored; or a copy of
//     20 or more characters of it): relevance 0.2, correctness 0.4;
//   - any other output: 0.8 and 0.8 — the rules cannot check facts, so a
//     plausible output never gets full marks;
//
// then, lowering correctness only:
//
//   - an output that opens as JSON ({ or [) but does not parse, and is not
//     marked output_truncated: at most 0.3;
//   - output_truncated: at most 0.7, only an excerpt was seen;
//   - latency_ms of 30 s or more: 0.1 less;
//
// and last, when the untrusted text holds instructions aimed at the rater
// (see Detect): both capped at 0.5, and the rating is flagged.
//
// A successful call with no output at all is not rated (see Handle); Rules
// rates it as if its output were empty.
func Rules(c Call) Rating {
	rel, cor, why := rulesCase(c)
	reasons := []string{why}
	out := strings.TrimSpace(c.Output)
	if c.Success && out != "" {
		if (out[0] == '{' || out[0] == '[') && !c.Truncated && !json.Valid([]byte(out)) && cor > malformedCorrectness {
			cor = malformedCorrectness
			reasons = append(reasons, "output opens as JSON but does not parse")
		}
		if c.Truncated && cor > excerptCorrectness {
			cor = excerptCorrectness
			reasons = append(reasons, "only an excerpt of the output was seen")
		}
	}
	if c.LatencyMs >= slowMs && cor > 0 {
		cor = math.Max(0, cor-slowPenalty)
		reasons = append(reasons, fmt.Sprintf("slow call (%d ms)", c.LatencyMs))
	}
	r := Rating{Kind: KindRules, Rater: RulesRater}
	if hit, ok := DetectCall(c); ok {
		r.Injection = true
		rel, cor = math.Min(rel, injectionCap), math.Min(cor, injectionCap)
		reasons = append(reasons, "untrusted "+hit.String()+" (rating capped at 0.5)")
	}
	r.Relevance, r.Correctness = round(rel), round(cor)
	r.Reason = RulesRater + ": " + strings.Join(reasons, "; ")
	return r
}

func rulesCase(c Call) (relevance, correctness float64, why string) {
	if !c.Success {
		if c.ErrorClass != "" {
			return failedRelevance, failedCorrectness, "call failed (" + oneLine(c.ErrorClass, 64) + ")"
		}
		return failedRelevance, failedCorrectness, "call failed"
	}
	out := strings.TrimSpace(c.Output)
	if out == "" {
		return emptyRelevance, emptyCorrectness, "empty output"
	}
	head := out
	if len(head) > errorWindow {
		head = head[:errorWindow]
	}
	for _, re := range errorLike {
		if m := re.FindString(head); m != "" {
			return errorRelevance, errorCorrectness, fmt.Sprintf("output looks like an error (%q)", oneLine(m, 40))
		}
	}
	if echoes(out, c.Input) {
		return echoRelevance, echoCorrectness, "output merely echoes the input"
	}
	return plainRelevance, plainCorrectness, "non-empty output with no sign of error or echo (facts not checked)"
}

// echoes reports whether output merely repeats input.
func echoes(output, input string) bool {
	o := normalize(output)
	if o == "" || strings.TrimSpace(input) == "" {
		return false
	}
	in := normalize(input)
	if o == in {
		return true
	}
	if vals := normalize(strings.Join(stringValues(input), " ")); vals != "" && o == vals {
		return true
	}
	return len(o) >= minEcho && strings.Contains(in, o)
}

// normalize lowercases s and turns every run of characters that are not
// letters or digits into one space.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		space = true
	}
	return b.String()
}

// stringValues returns the string leaves of a JSON document, in document
// order (object members by key), or nil when input is not JSON.
func stringValues(input string) []string {
	var v any
	if err := json.Unmarshal([]byte(input), &v); err != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(x[k])
			}
		}
	}
	walk(v)
	return out
}

// round keeps six decimals, the precision the scorer sums ratings in, so
// the stored, published and summed values are the same number.
func round(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// oneLine returns s on one line, at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
