package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

// Role is the author of a message, as the OpenAI chat-completions API names it.
type Role string

// The roles a Message can have.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Kind says which variant of Message a value is.
type Kind int

// The message variants. The zero Kind is KindNone, the kind of the zero
// Message, which Conversation.Append ignores.
const (
	KindNone       Kind = iota
	KindText            // system, user or assistant text, possibly from a template
	KindToolCall        // the model asking for a tool to be run
	KindToolResult      // what a tool returned for a call
	KindMedia           // a reference to an image or other media by URL
)

// String returns the kind's lower-case name.
func (k Kind) String() string {
	switch k {
	case KindText:
		return "text"
	case KindToolCall:
		return "tool_call"
	case KindToolResult:
		return "tool_result"
	case KindMedia:
		return "media"
	default:
		return "none"
	}
}

// Errors for invalid input. Template errors wrap ErrTemplate and, where it
// applies, ErrMissingParam or ErrUnknownParam. ErrInvalid marks any other
// input this package rejects: a message, a conversation that fails
// Validate, or a builder input missing a required field.
var (
	ErrTemplate     = errors.New("chat: template")
	ErrMissingParam = errors.New("chat: template parameter missing")
	ErrUnknownParam = errors.New("chat: template parameter not referenced")
	ErrInvalid      = errors.New("chat: invalid message")
)

// Message is one immutable entry of a Conversation. Build it with System,
// User, Assistant, Summary, Template, ToolCall, ToolResult or Media; the zero
// Message is empty and ignored by Conversation.Append.
//
// Every field is a string or number, and JSON arguments and schemas are kept
// as canonical JSON text, so a Message can be shared between goroutines
// without copying.
type Message struct {
	kind     Kind
	role     Role
	content  string // rendered text, media caption or tool result
	template string // template source when content came from a template
	name     string
	summary  bool

	callID   string
	toolName string
	args     string // canonical JSON object
	schema   string // canonical JSON, empty when none was given

	mimeType string
	url      string
	size     int64
}

// System returns a system message with the given text.
func System(text string) Message { return textMessage(RoleSystem, text) }

// User returns a user message with the given text.
func User(text string) Message { return textMessage(RoleUser, text) }

// Assistant returns an assistant message with the given text.
func Assistant(text string) Message { return textMessage(RoleAssistant, text) }

// Summary returns an assistant message marked as a summary of earlier
// messages, as SummarizeHistory produces.
func Summary(text string) Message {
	m := textMessage(RoleAssistant, text)
	m.summary = true
	return m
}

func textMessage(role Role, text string) Message {
	return Message{kind: KindText, role: role, content: text}
}

// Template renders src as a Go text/template with params and returns a text
// message with the result. The template is rendered once, here, so a
// Conversation never holds a message that could fail later.
//
// A parameter the template uses but params lacks is an error wrapping
// ErrMissingParam, never an empty string. A parameter in params that the
// template never names is an error wrapping ErrUnknownParam, because it
// usually means a misspelt name whose value silently went nowhere. A
// template that passes the whole dot to something ({{.}}, {{range .}},
// {{index . "k"}}, {{template "x" .}}) may use any key, so it is not checked
// for unknown parameters. Names used inside {{range}} or {{with}} are counted
// as referenced even when they name a field of the inner value; the check
// errs on the side of accepting.
func Template(role Role, src string, params map[string]any) (Message, error) {
	switch role {
	case RoleSystem, RoleUser, RoleAssistant:
	default:
		return Message{}, fmt.Errorf("%w: template role %q must be system, user or assistant", ErrInvalid, role)
	}
	t, err := template.New("message").Option("missingkey=error").Parse(src)
	if err != nil {
		return Message{}, fmt.Errorf("%w: parse: %w", ErrTemplate, err)
	}
	if err := checkUnknown(t, params); err != nil {
		return Message{}, err
	}
	if params == nil {
		// missingkey=error only applies to maps; a nil map would make
		// {{.x}} fail with a less helpful message.
		params = map[string]any{}
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, params); err != nil {
		if strings.Contains(err.Error(), "map has no entry for key") {
			return Message{}, fmt.Errorf("%w: %w: %w", ErrTemplate, ErrMissingParam, err)
		}
		return Message{}, fmt.Errorf("%w: execute: %w", ErrTemplate, err)
	}
	m := textMessage(role, buf.String())
	m.template = src
	return m, nil
}

// checkUnknown reports params that no field reference in t names.
func checkUnknown(t *template.Template, params map[string]any) error {
	if len(params) == 0 {
		return nil
	}
	used := map[string]bool{}
	wholeDot := false
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			walk(tt.Tree.Root, used, &wholeDot)
		}
	}
	if wholeDot {
		return nil
	}
	var unknown []string
	for k := range params {
		if !used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("%w: %w: %s", ErrTemplate, ErrUnknownParam, strings.Join(unknown, ", "))
}

func walk(n parse.Node, used map[string]bool, wholeDot *bool) {
	switch n := n.(type) {
	case nil:
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walk(c, used, wholeDot)
		}
	case *parse.ActionNode:
		walk(n.Pipe, used, wholeDot)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walk(c, used, wholeDot)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walk(a, used, wholeDot)
		}
	case *parse.FieldNode:
		used[n.Ident[0]] = true
	case *parse.VariableNode:
		// $.x names a top-level parameter; a bare $ is the whole dot.
		if n.Ident[0] == "$" {
			if len(n.Ident) > 1 {
				used[n.Ident[1]] = true
			} else {
				*wholeDot = true
			}
		}
	case *parse.ChainNode:
		walk(n.Node, used, wholeDot)
	case *parse.DotNode:
		*wholeDot = true
	case *parse.IfNode:
		walkBranch(&n.BranchNode, used, wholeDot)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, used, wholeDot)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, used, wholeDot)
	case *parse.TemplateNode:
		walk(n.Pipe, used, wholeDot)
	}
}

func walkBranch(b *parse.BranchNode, used map[string]bool, wholeDot *bool) {
	walk(b.Pipe, used, wholeDot)
	walk(b.List, used, wholeDot)
	walk(b.ElseList, used, wholeDot)
}

// ToolCall returns a message recording that the model asked for the named
// tool with args, and the JSON Schema the tool's response is expected to
// follow (nil when unknown). The call ID is derived from the name and
// arguments, so the same call always gets the same ID; use WithCallID to set
// the provider's ID instead.
//
// args and responseSchema are marshalled to canonical JSON here, so later
// changes to the caller's maps do not reach the message.
func ToolCall(name string, args map[string]any, responseSchema any) (Message, error) {
	if name == "" {
		return Message{}, fmt.Errorf("%w: tool call without a tool name", ErrInvalid)
	}
	if args == nil {
		args = map[string]any{}
	}
	a, err := json.Marshal(args)
	if err != nil {
		return Message{}, fmt.Errorf("%w: tool %s arguments: %w", ErrInvalid, name, err)
	}
	var s []byte
	if responseSchema != nil {
		if s, err = json.Marshal(responseSchema); err != nil {
			return Message{}, fmt.Errorf("%w: tool %s response schema: %w", ErrInvalid, name, err)
		}
	}
	return Message{
		kind:     KindToolCall,
		role:     RoleAssistant,
		toolName: name,
		args:     string(a),
		schema:   string(s),
		callID:   "call_" + nonce("tool_call", name+"\x00"+string(a)),
	}, nil
}

// ToolResult returns the tool's answer to the call with the given ID.
func ToolResult(callID, content string) Message {
	return Message{kind: KindToolResult, role: RoleTool, callID: callID, content: content}
}

// Media returns a user message referring to media by URL. size is in bytes,
// 0 when unknown. Images are rendered for OpenAI as image_url parts; other
// types as a text reference, since chat completions take no other media by
// URL.
func Media(mimeType, url string, size int64) Message {
	return Message{kind: KindMedia, role: RoleUser, mimeType: mimeType, url: url, size: size}
}

// WithCaption returns a copy of a media message with text sent alongside it.
func (m Message) WithCaption(text string) Message {
	m.content = text
	return m
}

// WithName returns a copy of m with the OpenAI participant name set.
func (m Message) WithName(name string) Message {
	m.name = name
	return m
}

// WithCallID returns a copy of a tool call message with the provider's call
// ID, replacing the derived one.
func (m Message) WithCallID(id string) Message {
	m.callID = id
	return m
}

// Kind returns the message's variant.
func (m Message) Kind() Kind { return m.kind }

// IsZero reports whether m is the zero Message.
func (m Message) IsZero() bool { return m.kind == KindNone }

// Role returns who wrote the message. Tool calls are the assistant's, tool
// results the tool's and media the user's.
func (m Message) Role() Role { return m.role }

// Content returns the text of a text message, the caption of a media message
// or the output of a tool result; it is empty for a tool call.
func (m Message) Content() string { return m.content }

// TemplateSource returns the template the content was rendered from, if any.
func (m Message) TemplateSource() (string, bool) { return m.template, m.template != "" }

// Name returns the OpenAI participant name, usually empty.
func (m Message) Name() string { return m.name }

// IsSummary reports whether the message summarises earlier ones.
func (m Message) IsSummary() bool { return m.summary }

// CallID returns the tool call ID of a tool call or tool result.
func (m Message) CallID() string { return m.callID }

// ToolName returns the tool a tool call asks for.
func (m Message) ToolName() string { return m.toolName }

// Arguments returns a tool call's arguments as a JSON object.
func (m Message) Arguments() json.RawMessage { return json.RawMessage(m.args) }

// ResponseSchema returns the JSON Schema of a tool call's expected response,
// or nil when none was given.
func (m Message) ResponseSchema() json.RawMessage {
	if m.schema == "" {
		return nil
	}
	return json.RawMessage(m.schema)
}

// MimeType returns a media message's MIME type.
func (m Message) MimeType() string { return m.mimeType }

// URL returns a media message's URL.
func (m Message) URL() string { return m.url }

// Size returns a media message's size in bytes, 0 when unknown.
func (m Message) Size() int64 { return m.size }

// text returns the plain-text rendering of m without a role header.
func (m Message) text() string {
	switch m.kind {
	case KindToolCall:
		s := m.toolName + " " + m.args
		if m.schema != "" {
			s += "\nresponse schema: " + m.schema
		}
		return s
	case KindMedia:
		s := m.mimeType + " " + m.url
		if m.size > 0 {
			s += fmt.Sprintf(" (%d bytes)", m.size)
		}
		if m.content != "" {
			s += "\n" + m.content
		}
		return s
	default:
		return m.content
	}
}

// header returns the label Text puts above m.
func (m Message) header() string {
	switch m.kind {
	case KindToolCall:
		return "tool call " + m.callID
	case KindToolResult:
		return "tool result " + m.callID
	case KindMedia:
		return "media"
	}
	h := string(m.role)
	if m.summary {
		h += " (summary)"
	}
	if m.name != "" {
		h += " " + m.name
	}
	return h
}
