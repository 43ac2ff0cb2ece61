package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentq/agentq/internal/answer"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/indexer"
)

// The write tools publish input events: their arguments are the event's
// data, as the contract describes it, so fields the contract gains reach
// the consumers without a change here.

// Published is what tool_report and feedback_submit return.
type Published struct {
	EventID   string `json:"event_id" jsonschema:"The CloudEvents id the event was published with. Calling again with this event_id has no second effect."`
	Type      string `json:"type" jsonschema:"The event's CloudEvents type."`
	Subject   string `json:"subject" jsonschema:"The NATS subject it was published on."`
	Duplicate bool   `json:"duplicate" jsonschema:"True when an event with this id had already been published within the stream's duplicate window: it was not stored again."`
	Sequence  uint64 `json:"stream_sequence" jsonschema:"The event's sequence number in stream AGENTQ (the earlier one's, for a duplicate)."`
}

// Created is what prompt_create returns: the indexer's answer.
type Created struct {
	EventID     string   `json:"event_id" jsonschema:"The id of the prompt.created event published."`
	PromptID    string   `json:"prompt_id" jsonschema:"The prompt's id."`
	Version     int      `json:"version" jsonschema:"The version stored (the next free one when the request named none), or the existing version with the same content."`
	ContentHash string   `json:"content_hash" jsonschema:"The version's content hash: feedback_submit's prompt_hash."`
	Outcome     string   `json:"outcome" jsonschema:"created: a new version was stored; unchanged: the same content was already stored as this version."`
	Labels      []string `json:"labels,omitempty" jsonschema:"Labels on the version, for an unchanged one (a new version has none until prompt.activated moves one to it)."`
}

// eventIDProperty lets an agent retry a publish without a second effect.
var eventIDProperty = map[string]any{
	"type": "string", "minLength": 1, "maxLength": 256,
	"description": "Optional id for the event (any unique string, e.g. a UUID). Send the same event_id when retrying a call whose answer you did not get: agentq counts the event once. Omitted: a new one.",
}

func (s *Server) addWriteTools() error {
	in, err := inputSchema(indexer.TypePromptCreated, nil)
	if err != nil {
		return err
	}
	addTool(s, indexer.TypePromptCreated, &mcp.Tool{Name: "prompt_create", Title: "Create a prompt version", InputSchema: in,
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)},
		Description: "Add a prompt, or a new version of one, to agentq's library, and wait for the indexer to store it. " +
			"content is a Go text/template ({{.Name}} inserts parameter Name); declare each parameter in parameters. " +
			"Without version the next free version is taken; the same content as the latest version is answered unchanged, so a retry is harmless. " +
			"Versions are immutable: different content for an existing version is refused. A new version is not labelled production: prompt_get returns it by its version until an operator activates it."},
		s.promptCreate)

	in, err = inputSchema("agentq.tool.executed.v1", map[string]any{"event_id": eventIDProperty})
	if err != nil {
		return err
	}
	addTool(s, "agentq.tool.executed.v1", &mcp.Tool{Name: "tool_report", Title: "Report a tool call", InputSchema: in,
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)},
		Description: "Report the outcome of a tool call you made (tool_name, success, and what you know: latency_ms, error_class, input, an excerpt of the output, your own rating). " +
			"agentq rates it, updates the tool's quality score (which ranks tool_search) and degrades or quarantines tools that start failing. " +
			"Report every call, successes too: a tool's health is judged against its own record."},
		s.publisher("agentq.tool.executed.v1"))

	in, err = inputSchema("agentq.feedback.submitted.v1", map[string]any{"event_id": eventIDProperty})
	if err != nil {
		return err
	}
	addTool(s, "agentq.feedback.submitted.v1", &mcp.Tool{Name: "feedback_submit", Title: "Give feedback", InputSchema: in,
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)},
		Description: "Rate a prompt version or a tool: target prompt (with prompt_hash, or prompt_id and version, from prompt_get) or tool (with tool_name), " +
			"and a rating from 0 to 1 or thumbs up or down, optionally a comment and the query and response it is about. " +
			"Ratings feed the quality scores that rank search results; thumbs down marks a sample the lab learns from."},
		s.publisher("agentq.feedback.submitted.v1"))
	return nil
}

// eventData splits the arguments into the optional event_id and the
// event's data.
func eventData(args json.RawMessage) (id string, data json.RawMessage, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return "", nil, actionable("the arguments must be a JSON object: %v", err)
	}
	raw, ok := m["event_id"]
	if !ok {
		return "", args, nil
	}
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", nil, actionable("invalid arguments: event_id must be a string. Fix it and call again.")
	}
	delete(m, "event_id")
	data, err = json.Marshal(m)
	return id, data, err
}

// newEvent builds the event of type typ with data for tenant, with id or
// a new one, and checks it against the contract.
func (s *Server) newEvent(typ, tenant, id string, data json.RawMessage) (event.Event, error) {
	if err := s.opts.Registry.Validate(typ, data); err != nil {
		return event.Event{}, explain(err, "")
	}
	ev, err := bus.NewEvent(typ, tenant, source, data)
	if err != nil {
		return event.Event{}, explain(err, "")
	}
	if id != "" {
		if err := bus.ValidID(id); err != nil {
			return event.Event{}, actionable("invalid arguments: %v. Fix event_id and call again.", err)
		}
		ev.SetID(id)
	}
	return ev, nil
}

// publisher is the handler of a tool that publishes its arguments as an
// event of type typ.
func (s *Server) publisher(typ string) func(context.Context, call, map[string]any) (Published, error) {
	return func(ctx context.Context, c call, _ map[string]any) (Published, error) {
		id, data, err := eventData(c.args)
		if err != nil {
			return Published{}, err
		}
		ev, err := s.newEvent(typ, c.tenant, id, data)
		if err != nil {
			return Published{}, err
		}
		subject, _ := bus.Subject(ev)
		ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
		ack, err := s.pub.Publish(ctx, ev)
		if err != nil {
			s.log.Warn().Err(err).Str("subject", subject).Msg("publish failed")
			return Published{}, actionable("agentq did not take the event (%v). Retry with the same event_id, %s, so it is counted once.", err, ev.ID())
		}
		return Published{EventID: ev.ID(), Type: typ, Subject: subject, Duplicate: ack.Duplicate, Sequence: ack.Sequence}, nil
	}
}

// promptCreate publishes prompt.created and waits for the indexer's
// answer.
func (s *Server) promptCreate(ctx context.Context, c call, _ map[string]any) (Created, error) {
	ev, err := s.newEvent(indexer.TypePromptCreated, c.tenant, "", c.args)
	if err != nil {
		return Created{}, err
	}
	a, err := answer.Await(ctx, s.js, s.opts.Registry, ev, indexer.TypePromptIndexed, indexer.TypeRejected, s.opts.AnswerTimeout)
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return Created{}, err
	case err != nil:
		s.log.Warn().Err(err).Str("event_id", ev.ID()).Msg("prompt.created: publish or wait failed")
		return Created{}, actionable("agentq did not take the prompt (%v). Retry: the same content is stored once.", err)
	case a == nil:
		return Created{}, actionable("prompt.created %s was published, but the indexer did not answer within %s: it is not running or is behind. "+
			"It will store the prompt when it catches up; calling prompt_create again with the same content is harmless (answered unchanged).", ev.ID(), s.opts.AnswerTimeout)
	case a.Type == indexer.TypeRejected:
		var r struct {
			Code   string `json:"reason_code"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(a.Data, &r)
		hint := ""
		switch r.Code {
		case indexer.ReasonVersionConflict:
			hint = " Omit version to create the next one, or name a version not used yet."
		case indexer.ReasonVersionExhausted:
			hint = " Name the version explicitly."
		}
		return Created{}, actionable("the indexer refused the prompt (%s): %s.%s", r.Code, r.Reason, hint)
	}
	var d struct {
		PromptID    string   `json:"prompt_id"`
		Version     int      `json:"version"`
		ContentHash string   `json:"content_hash"`
		Outcome     string   `json:"outcome"`
		Labels      []string `json:"labels"`
	}
	if err := json.Unmarshal(a.Data, &d); err != nil {
		return Created{}, fmt.Errorf("prompt.indexed %s: %w", a.ID, err)
	}
	if d.Outcome == "" {
		d.Outcome = indexer.OutcomeCreated
	}
	return Created{EventID: ev.ID(), PromptID: d.PromptID, Version: d.Version, ContentHash: d.ContentHash, Outcome: d.Outcome, Labels: d.Labels}, nil
}
