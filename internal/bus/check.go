package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
)

// checkEvent applies agentq's rules to a decoded or to-be-encoded event:
// CloudEvents 1.0, printable attributes within their limits, and JSON data
// that is UTF-8 and well-formed.
func checkEvent(ev event.Event) error {
	if ev.Context == nil {
		return errors.New("event has no specversion")
	}
	if sv := ev.SpecVersion(); sv != specVersion {
		return fmt.Errorf("specversion %s is not supported: agentq accepts CloudEvents %s only", quote(sv), specVersion)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("invalid event: %s", sdkError(err))
	}
	attrs := []struct{ name, value string }{
		{"id", ev.ID()},
		{"type", ev.Type()},
		{"source", ev.Source()},
		{"subject", ev.Subject()},
		{"dataschema", ev.DataSchema()},
		{"datacontenttype", ev.DataContentType()},
	}
	for _, a := range attrs {
		if a.value == "" && a.name != "id" && a.name != "type" && a.name != "source" {
			continue // optional and absent
		}
		if err := checkText(a.name, a.value, attrLimits[a.name]); err != nil {
			return err
		}
	}
	exts := extensions(ev)
	for _, name := range []string{ExtTenant, ExtCausation} {
		v, ok := exts[name]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s is not a string (got %T)", name, v)
		}
		if err := checkText(name, s, attrLimits[name]); err != nil {
			return err
		}
	}
	return checkData(ev.DataContentType(), ev.Data())
}

// checkData requires JSON data to be valid UTF-8 and well-formed.
func checkData(ct string, data []byte) error {
	if len(data) == 0 || !isJSON(ct) {
		return nil
	}
	if i := invalidUTF8(data); i >= 0 {
		return fmt.Errorf("data is not valid UTF-8 (byte %d)", i)
	}
	if err := jsonSyntax(data); err != nil {
		return fmt.Errorf("data is not well-formed JSON: %w", err)
	}
	return nil
}

// isJSON reports whether a content type announces JSON; no content type
// means JSON, as the CloudEvents JSON format says.
func isJSON(ct string) bool {
	if ct == jsonCT { // what agentq sends: spare the parse
		return true
	}
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == jsonCT || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// jsonSyntax returns nil when data is one well-formed JSON value, else the
// syntax error with its offset.
func jsonSyntax(data []byte) error {
	if json.Valid(data) {
		return nil
	}
	var v struct{}
	err := json.Unmarshal(data, &v)
	var serr *json.SyntaxError
	if errors.As(err, &serr) {
		return fmt.Errorf("%s (byte %d)", foreign(serr.Error()), serr.Offset)
	}
	if err == nil {
		return errors.New("not a JSON value")
	}
	return errors.New(foreign(err.Error()))
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// invalidUTF8 returns the offset of the first byte that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// checkString applies the CloudEvents 1.0 rule for String values: valid
// UTF-8 without control characters or noncharacters.
func checkString(what, s string) error {
	if printableASCII(s) {
		return nil // the usual case, spared the rune loop
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("%s is not valid UTF-8 (byte %d): %s", what, i, quote(s))
		case isControl(r):
			return fmt.Errorf("%s has a control character (%U) at byte %d: %s", what, r, i, quote(s))
		case isNoncharacter(r):
			return fmt.Errorf("%s has a Unicode noncharacter (%U) at byte %d: %s", what, r, i, quote(s))
		}
	}
	return nil
}

// checkText applies agentq's rule for the attributes it reads: 1 to limit
// bytes of printable text (see ValidID).
func checkText(what, s string, limit int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, over the %d-byte limit: %s", what, len(s), limit, quote(s))
	}
	// Printable ASCII has no control, invisible or noncharacter, and its
	// only white space is the space: the usual case needs no rune loop.
	if printableASCII(s) && s[0] != ' ' && s[len(s)-1] != ' ' {
		return nil
	}
	if err := checkString(what, s); err != nil {
		return err
	}
	for i, r := range s {
		if isInvisible(r) {
			return fmt.Errorf("%s has an invisible formatting character (%U) at byte %d: %s", what, r, i, quote(s))
		}
	}
	if strings.TrimFunc(s, unicode.IsSpace) == "" {
		return fmt.Errorf("%s is only whitespace: %s", what, quote(s))
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("%s starts or ends with whitespace: %s", what, quote(s))
	}
	return nil
}

// isControl reports the Unicode control characters (category Cc), which
// CloudEvents forbids in strings.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// isNoncharacter reports Unicode noncharacters, which CloudEvents forbids.
func isNoncharacter(r rune) bool {
	return (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe
}

// isInvisible reports characters that change how text is shown or split
// into lines without being seen: line and paragraph separators, zero-width
// characters, bidirectional controls and the byte order mark. They make an
// id that looks like another, or a log line that lies.
func isInvisible(r rune) bool {
	switch {
	case r >= 0x200b && r <= 0x200f, // zero-width space, joiners, LRM, RLM
		r >= 0x2028 && r <= 0x202e, // line and paragraph separators, bidi embeddings and overrides
		r >= 0x2060 && r <= 0x2064, // word joiner, invisible operators
		r >= 0x2066 && r <= 0x2069, // bidi isolates
		r == 0xfeff:                // byte order mark
		return true
	}
	return false
}

// sdkError renders an error of the CloudEvents SDK as one line. Its
// ValidationError lists fields in map order, one per line; this sorts them.
func sdkError(err error) string {
	var verr event.ValidationError
	if errors.As(err, &verr) {
		parts := make([]string, 0, len(verr))
		for _, k := range slices.Sorted(maps.Keys(verr)) {
			parts = append(parts, k+": "+verr[k].Error())
		}
		return foreign(strings.Join(parts, "; "))
	}
	return foreign(err.Error())
}

// foreign makes an error text from a library safe to embed: one line,
// valid UTF-8, at most maxForeign bytes. Library messages may quote input.
func foreign(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if isControl(r) || isInvisible(r) {
			return ' '
		}
		return r
	}, s)
	return truncateBytes(strings.TrimSpace(s), maxForeign)
}

// quote renders an untrusted value for an error: Go-quoted, so it stays
// on one line, and cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(truncateBytes(s, maxQuoted))
}

// truncateBytes cuts s to at most n bytes plus an ellipsis, on a rune
// boundary when s is valid UTF-8 there.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + "…"
}
