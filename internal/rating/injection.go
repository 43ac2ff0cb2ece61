package rating

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

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
//
// The text is read as the model reads it: a call's input is shown as
// JSON, and an output or a summary may hold JSON, where "\u0020" is a
// space and "\n" a line break to the model; so text holding backslash
// escapes is also checked with them decoded (unescape), up to
// maxUnescape times for escapes escaped again.
func Detect(field, text string) (Injection, bool) {
	if strings.TrimSpace(text) == "" {
		return Injection{}, false
	}
	for n := 0; ; n++ {
		folded := strings.Join(strings.Fields(strings.ToLower(zeroWidth.Replace(norm.NFKC.String(text)))), " ")
		for _, re := range injectionPatterns {
			if m := re.FindString(folded); m != "" {
				return Injection{Field: field, Phrase: oneLine(m, 80)}, true
			}
		}
		if n == maxUnescape || !strings.Contains(text, `\`) {
			return Injection{}, false
		}
		decoded := unescape(text)
		if decoded == text {
			return Injection{}, false
		}
		text = decoded
	}
}

// maxUnescape bounds how many layers of escaping Detect decodes.
const maxUnescape = 3

// unescape decodes JSON's backslash escapes wherever they are in text,
// in one pass: \uXXXX (surrogate pairs joined) to its character, \n \t
// \r \b \f to a space, \" \\ \/ to the character. Anything else is
// kept as it is.
func unescape(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '\\' || i+1 == len(text) {
			b.WriteByte(c)
			continue
		}
		switch e := text[i+1]; e {
		case 'n', 't', 'r', 'b', 'f':
			b.WriteByte(' ')
			i++
		case '"', '\\', '/':
			b.WriteByte(e)
			i++
		case 'u':
			r, ok := hex4(text[i+2:])
			if !ok {
				b.WriteByte(c)
				continue
			}
			i += 5
			if utf16.IsSurrogate(r) && strings.HasPrefix(text[i+1:], `\u`) {
				if r2, ok := hex4(text[i+3:]); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					}
				}
			}
			b.WriteRune(r)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// hex4 reads the four hex digits s starts with.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:4], 16, 32)
	return rune(n), err == nil
}

// DetectCall runs Detect on every untrusted text of c: its input, then
// its output.
func DetectCall(c Call) (Injection, bool) {
	if h, ok := Detect("input", c.Input); ok {
		return h, true
	}
	return Detect("output", c.Output)
}
