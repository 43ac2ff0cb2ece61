package rating

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Injection is instruction-like text aimed at the rater, found in a
// call's untrusted text.
type Injection struct {
	Field  string // input, output or summary
	Phrase string // the matched text, on one line, at most 80 runes
}

func (h Injection) String() string {
	return fmt.Sprintf("%s holds instructions aimed at the rater (%q)", h.Field, h.Phrase)
}

// injectionPatterns match text that addresses whoever reads it as a rater
// rather than being material to rate: orders to drop earlier instructions,
// orders to give a score, a forged rating answer, forged fence markers,
// and notes to the model. They run on text folded with NFKC (fullwidth
// and other compatibility forms become ASCII), stripped of zero-width
// characters, lowercased, with runs of spaces collapsed.
var injectionPatterns = []*regexp.Regexp{
	regexp.MustCompile(`\b(ignore|disregard|forget|override|bypass)\s+(all\s+|any\s+|the\s+|your\s+|of\s+)*(previous|prior|above|earlier|preceding|foregoing|former|system|original|rating|grading)\s+(instructions?|prompts?|rules?|directions?|messages?|guidelines?|criteria)\b`),
	regexp.MustCompile(`\b(rate|score|grade|rank|evaluate|mark)\s+(this|it|these|them|me|us|the\s+(output|answer|response|result|reply|tool|call))\b[^.\n]{0,40}?(\b[01](\.[0-9]+)?\b|\bperfect|\bmax(imum)?\b|\bfull\s+marks|\bhighest\b|\blowest\b|\bzero\b)`),
	regexp.MustCompile(`"?relevance"?\s*[:=]\s*[0-9.]+\s*,\s*"?correctness"?\s*[:=]`),
	regexp.MustCompile(`<{3,}\s*(begin|end)\b`),
	regexp.MustCompile(`\b(note|message|instructions?|attention)\s+(to|for)\s+(the\s+|any\s+)?(ai|llm|model|rater|judge|grader|evaluator|assistant|reviewer)\b`),
	regexp.MustCompile(`\b(new|updated|revised|additional|important)\s+(system\s+)?instructions?\s*:`),
}

// zeroWidth removes characters that render as nothing, which would
// otherwise split the words the patterns look for.
var zeroWidth = strings.NewReplacer("\u200b", "", "\u200c", "", "\u200d", "", "\u2060", "", "\ufeff", "", "\u00ad", "")

// Detect reports the first instruction aimed at the rater in text, the
// untrusted content of field. It is a tripwire for known phrasings, not a
// proof of innocence: text that does not match may still carry an
// injection a model obeys (see the package comment).
func Detect(field, text string) (Injection, bool) {
	if strings.TrimSpace(text) == "" {
		return Injection{}, false
	}
	folded := strings.Join(strings.Fields(strings.ToLower(zeroWidth.Replace(norm.NFKC.String(text)))), " ")
	for _, re := range injectionPatterns {
		if m := re.FindString(folded); m != "" {
			return Injection{Field: field, Phrase: oneLine(m, 80)}, true
		}
	}
	return Injection{}, false
}

// DetectCall runs Detect on every untrusted text of c: its input, then
// its output.
func DetectCall(c Call) (Injection, bool) {
	if h, ok := Detect("input", c.Input); ok {
		return h, true
	}
	return Detect("output", c.Output)
}
