// Package library is agentq's prompt library: immutable, content-hashed
// prompt versions, their text/template parameters, and labels.
//
// A version never changes once stored: the same content, type and
// parameters again for an existing id and version is a no-op, different
// content, type or parameters (DiffParams) is a version conflict. Labels
// (production, staging, any other) are the only thing that moves. The
// indexer (internal/indexer) applies prompt.created and prompt.activated,
// keeping each prompt's log in stream order here (QueueLog, ReadLog,
// Versions, ReplaceLabels); search (internal/search) reads the rows and
// renders with Render.
package library

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Types are the kinds of prompt prompt.created accepts.
var Types = []string{"system", "user", "task", "repair", "routing", "tool_description", "chain_of_thought", "custom"}

// Param declares one template parameter.
type Param struct {
	Name        string `json:"name"`
	Type        string `json:"type,omitempty"` // string, number, integer, boolean, array, object; "" = any
	Required    bool   `json:"required,omitempty"`
	Default     any    `json:"default,omitempty"`
	Description string `json:"description,omitempty"`
}

// Prompt is one stored version.
type Prompt struct {
	Tenant      string          `json:"tenant"`
	ID          string          `json:"id"`
	Version     int             `json:"version"`
	Hash        string          `json:"content_hash"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Content     string          `json:"content"`
	Parameters  []Param         `json:"parameters,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Labels      []string        `json:"labels,omitempty"`
	Author      string          `json:"author,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	CreatedAt   time.Time       `json:"created_at"`
}

// hashInput is the hashed payload: id, version, content and type.
type hashInput struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	Content string `json:"content"`
	Type    string `json:"type"`
}

// Hash is a version's content hash: lowercase hex
// SHA-256 of the JSON of {id, version, content, type}, encoded by Go's
// encoding/json (which escapes <, > and & in strings, and U+2028 and
// U+2029 as \u2028 and \u2029: agents computing the hash elsewhere must do
// the same). The parameters are not hashed: DiffParams compares them.
func Hash(id string, version int, content, typ string) string {
	b, err := json.Marshal(hashInput{ID: id, Version: version, Content: content, Type: typ})
	if err != nil {
		panic(err) // strings and an int always marshal
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
