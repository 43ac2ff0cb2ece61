package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Errors returned when a model's answer cannot be used. ErrNoAnswer means no
// JSON object with the expected fields was found; ErrBadAnswer that one was
// found but a field is missing, of the wrong type or out of range.
var (
	ErrNoAnswer  = errors.New("chat: no JSON answer found")
	ErrBadAnswer = errors.New("chat: invalid answer")
)

// maxCandidates bounds how many '{' positions findObject tries, so a reply
// full of braces cannot make parsing quadratic.
const maxCandidates = 64

// findObject returns the last JSON object in text that has all the required
// keys, with its keys lower-cased. Models wrap JSON in prose or ```json
// fences, think aloud before answering, and sometimes quote the example
// from the prompt first; the answer is what they write last. So it tries
// each '{' from the end of the text backwards and returns the first object
// that decodes and has the keys. An inner object is tried before the one
// around it, but fails the required keys unless the answer itself is
// nested, in which case returning it is right.
func findObject(text string, required ...string) (map[string]json.RawMessage, error) {
	end := len(text)
	for tried := 0; tried < maxCandidates; tried++ {
		i := strings.LastIndexByte(text[:end], '{')
		if i < 0 {
			break
		}
		end = i
		var raw map[string]json.RawMessage
		if err := json.NewDecoder(strings.NewReader(text[i:])).Decode(&raw); err != nil {
			continue
		}
		obj := make(map[string]json.RawMessage, len(raw))
		for k, v := range raw {
			key := strings.ToLower(strings.TrimSpace(k))
			if _, dup := obj[key]; dup {
				return nil, fmt.Errorf("%w: key %q appears twice with different case", ErrBadAnswer, key)
			}
			obj[key] = v
		}
		if hasAll(obj, required) {
			return obj, nil
		}
	}
	return nil, fmt.Errorf("%w: want an object with %s", ErrNoAnswer, strings.Join(required, ", "))
}

func hasAll(obj map[string]json.RawMessage, keys []string) bool {
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return false
		}
	}
	return true
}

// unitField decodes obj[key] as a number in [0, 1].
func unitField(obj map[string]json.RawMessage, key string) (float64, error) {
	return rangeField(obj, key, 1)
}

// rangeField decodes obj[key] as a number in [0, max].
func rangeField(obj map[string]json.RawMessage, key string, max float64) (float64, error) {
	var v float64
	if err := json.Unmarshal(obj[key], &v); err != nil {
		return 0, fmt.Errorf("%w: %s is %s, want a number", ErrBadAnswer, key, obj[key])
	}
	if math.IsNaN(v) || v < 0 || v > max {
		return 0, fmt.Errorf("%w: %s is %g, want 0 to %g", ErrBadAnswer, key, v, max)
	}
	return v, nil
}

// stringField decodes obj[key] as a string; a missing key is "".
func stringField(obj map[string]json.RawMessage, key string) (string, error) {
	raw, ok := obj[key]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s is %s, want a string", ErrBadAnswer, key, raw)
	}
	return strings.TrimSpace(s), nil
}
