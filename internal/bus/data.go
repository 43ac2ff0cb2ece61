package bus

import (
	jsonv2 "github.com/go-json-experiment/json"
)

// DecodeData decodes an event's data, already validated against its
// schema, into v, reading each field only under the exact name v declares.
//
// encoding/json also takes a name that differs only in letter case, and
// the schemas allow properties they do not name: data carrying both
// "tool_name" and "TOOL_NAME" passed validation on the first and was read
// from the second, and a lone "LATENCY_MS" was read though nothing checked
// it. A name given twice in one object is an error: which copy the schema
// checked and which one a reader takes cannot both be known. (The decoder
// is encoding/json/v2's, from the module it is developed in.)
func DecodeData(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v)
}
