package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"regexp"
	"strings"
	"sync"
)

// FenceKind labels what a fenced section holds.
type FenceKind string

// The kinds of untrusted data agentq fences.
const (
	FenceToolDescription  FenceKind = "TOOL_DESCRIPTION"
	FenceToolInput        FenceKind = "TOOL_INPUT"
	FenceToolOutput       FenceKind = "TOOL_OUTPUT"
	FenceUserQuery        FenceKind = "USER_QUERY"
	FenceModelResponse    FenceKind = "MODEL_RESPONSE"
	FenceReferenceAnswer  FenceKind = "REFERENCE_ANSWER"
	FenceAgentResult      FenceKind = "AGENT_RESULT"
	FenceBackground       FenceKind = "BACKGROUND"
	FenceExperimentReport FenceKind = "EXPERIMENT_REPORT"
	FencePrompt           FenceKind = "PROMPT"
	FenceFeedbackComment  FenceKind = "FEEDBACK_COMMENT"
)

// markerLike matches anything a model might read as a fence marker: three or
// more '<', optional spaces, then BEGIN or END in any case. It is wider than
// the grammar Fence writes on purpose.
var markerLike = regexp.MustCompile(`(?i)<{3,}\s*(?:begin|end)`)

// Fence wraps untrusted content between begin and end markers:
//
//	<<<BEGIN TOOL_OUTPUT 1a2b3c4d5e6f>>>
//	content
//	<<<END TOOL_OUTPUT 1a2b3c4d5e6f>>>
//
// Content cannot close its fence early or open a fake one, for two reasons.
// Every marker-looking sequence inside it ("<<<END", "<<< begin", ...) has
// its angle brackets replaced by '‹', so no line of content matches the
// marker grammar. And the nonce, twelve hex digits of a SHA-256 of the kind
// and the neutralised content, is one a writer of content cannot know in
// advance without finding a hash fixed point. The nonce is derived rather
// than random so the same input always yields the same prompt, which golden
// files and prompt caches rely on.
func Fence(kind FenceKind, content string) string {
	var b strings.Builder
	writeFence(&b, kind, content)
	return b.String()
}

// writeFence writes Fence(kind, content) to b.
func writeFence(b *strings.Builder, kind FenceKind, content string) {
	content = Neutralize(content)
	var buf [nonceLen]byte
	n := appendNonce(buf[:0], string(kind), content)
	b.Grow(len(content) + 2*(len(kind)+len(n)+14))
	b.WriteString("<<<BEGIN ")
	b.WriteString(string(kind))
	b.WriteByte(' ')
	b.Write(n)
	b.WriteString(">>>\n")
	b.WriteString(content)
	if !strings.HasSuffix(content, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString("<<<END ")
	b.WriteString(string(kind))
	b.WriteByte(' ')
	b.Write(n)
	b.WriteString(">>>")
}

// Neutralize returns content with every fence-marker-looking sequence
// defused, as Fence does before wrapping it: each '<' of a run of three or
// more before BEGIN or END becomes '‹'. All other text is kept byte for byte.
func Neutralize(content string) string {
	// Cheap test first: almost no content has "<<<" at all.
	if !strings.Contains(content, "<<<") {
		return content
	}
	return markerLike.ReplaceAllStringFunc(content, func(m string) string {
		return strings.ReplaceAll(m, "<", "‹")
	})
}

// hasher is a reusable SHA-256 state with a buffer for feeding it strings;
// pooling it keeps fencing free of allocations beyond the prompt itself,
// which matters because every rating fences three or four sections.
type hasher struct {
	h   hash.Hash
	buf [512]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New()} }}

// nonceLen is the length of a nonce in hex digits: 48 bits.
const nonceLen = 12

// appendNonce appends twelve hex digits identifying content in a domain.
func appendNonce(dst []byte, domain, content string) []byte {
	hs := hashers.Get().(*hasher)
	defer hashers.Put(hs)
	hs.h.Reset()
	hs.writeString(domain)
	hs.writeString("\x00")
	hs.writeString(content)
	sum := hs.h.Sum(hs.buf[:0])
	return hex.AppendEncode(dst, sum[:nonceLen/2])
}

func (hs *hasher) writeString(s string) {
	for len(s) > 0 {
		n := copy(hs.buf[:], s)
		hs.h.Write(hs.buf[:n])
		s = s[n:]
	}
}

// nonce returns appendNonce's digits as a string.
func nonce(domain, content string) string {
	var buf [nonceLen]byte
	return string(appendNonce(buf[:0], domain, content))
}
