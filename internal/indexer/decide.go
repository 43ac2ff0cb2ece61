package indexer

import (
	"fmt"
	"math"

	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// decision is what the indexer decided for one prompt.created,
// prompt.activated or tool.registered: the version it created or found, or
// why it could not.
type decision struct {
	reject  *rejection // nil: done
	outcome string     // OutcomeCreated or OutcomeUnchanged
	version int
	hash    string
}

// key names a decision: two decisions with one key are the same to
// whoever reads the result.
func (d decision) key() string {
	if d.reject != nil {
		return "rejected:" + d.reject.code + ":" + d.reject.reason
	}
	return fmt.Sprintf("%s:%d:%s", d.outcome, d.version, d.hash)
}

// versionView is what a create is decided against: the prompt id's newest
// version and any version, with their hashes and parameter declarations
// (promptWrites for a batch applied in order, promptFold for a prompt id
// decided again).
type versionView interface {
	head(tenant, id string) (library.Found, error)
	version(tenant, id string, version int) (library.Found, bool, error)
}

// decidePrompt decides a create (p.Version 0: the next free version). A
// version is its content and type (the hash) and its parameter
// declaration: the same content with another declaration is a conflict
// for an explicit version and the next version without one, never
// "unchanged" with the new declaration dropped.
func decidePrompt(v versionView, p library.Prompt) (decision, error) {
	if p.Version > 0 {
		h := library.Hash(p.ID, p.Version, p.Content, p.Type)
		existing, found, err := v.version(p.Tenant, p.ID, p.Version)
		switch {
		case err != nil:
			return decision{}, err
		case !found:
			return decision{outcome: OutcomeCreated, version: p.Version, hash: h}, nil
		case existing.Hash != h:
			return decision{version: p.Version, reject: &rejection{
				code:    ReasonVersionConflict,
				reason:  fmt.Sprintf("prompt %s version %d already exists with different content or type (hash %s); versions are immutable: create a new version", p.ID, p.Version, existing.Hash),
				details: map[string]any{"prompt_id": p.ID, "version": p.Version, "existing_hash": existing.Hash, "hash": h},
			}}, nil
		}
		if diff, differ := library.DiffParams(existing.Params, p.Parameters); differ {
			return decision{version: p.Version, reject: &rejection{
				code:   ReasonVersionConflict,
				reason: fmt.Sprintf("prompt %s version %d already exists with the same content and type but different parameters: %s; versions are immutable: create a new version", p.ID, p.Version, diff),
				details: map[string]any{"prompt_id": p.ID, "version": p.Version, "existing_hash": existing.Hash, "hash": h,
					"parameter": diff.Param, "field": diff.Field},
			}}, nil
		}
		return decision{outcome: OutcomeUnchanged, version: p.Version, hash: h}, nil
	}
	head, err := v.head(p.Tenant, p.ID)
	if err != nil {
		return decision{}, err
	}
	if head.Version > 0 && library.Hash(p.ID, head.Version, p.Content, p.Type) == head.Hash {
		if _, differ := library.DiffParams(head.Params, p.Parameters); !differ {
			return decision{outcome: OutcomeUnchanged, version: head.Version, hash: head.Hash}, nil
		}
	}
	if head.Version >= math.MaxInt32 {
		return decision{reject: &rejection{
			code:    ReasonVersionExhausted,
			reason:  fmt.Sprintf("prompt %s has version %d, the largest there is: a create without a version has no next one to take; give the version explicitly", p.ID, head.Version),
			details: map[string]any{"prompt_id": p.ID, "version": head.Version},
		}}, nil
	}
	next := head.Version + 1
	return decision{outcome: OutcomeCreated, version: next, hash: library.Hash(p.ID, next, p.Content, p.Type)}, nil
}

// decideLabel decides an activation of version, whose hash is hash when
// an event before it in the stream created it (found).
func decideLabel(tenant string, l labelMove, hash string, found bool) decision {
	if !found {
		return decision{version: l.version, reject: &rejection{
			code:    ReasonUnknownVersion,
			reason:  fmt.Sprintf("prompt %s has no version %d in tenant %s created before this activation in the stream", l.promptID, l.version, tenant),
			details: map[string]any{"prompt_id": l.promptID, "version": l.version, "label": l.label},
		}}
	}
	return decision{outcome: OutcomeUnchanged, version: l.version, hash: hash}
}

// decideTool decides a registration against the current definition
// (version 0: none).
func decideTool(curVersion int, curHash, hash string) decision {
	if curVersion > 0 && curHash == hash {
		return decision{outcome: OutcomeUnchanged, version: curVersion, hash: hash}
	}
	return decision{outcome: OutcomeCreated, version: curVersion + 1, hash: hash}
}

// promptData is prompt.indexed's data for a create or an activation of p
// decided d; model is the stored vector's ("" without one).
func promptData(p library.Prompt, d decision, model string, dim int, labels []string, activation bool) map[string]any {
	data := map[string]any{"prompt_id": p.ID, "version": d.version, "content_hash": d.hash, "outcome": d.outcome}
	if !activation {
		data["type"], data["name"] = p.Type, p.Name
	}
	if d.outcome == OutcomeCreated && model != "" {
		data["embedding_model"], data["embedding_dim"] = model, dim
	}
	if d.outcome == OutcomeUnchanged && len(labels) > 0 {
		data["labels"] = labels
	}
	return data
}

// toolData is tool.indexed's data for a registration of t decided d.
func toolData(t registry.Tool, d decision, model string, dim int) map[string]any {
	data := map[string]any{"tool_name": t.Name, "version": d.version, "content_hash": d.hash, "outcome": d.outcome}
	if t.Server != "" {
		data["server"] = t.Server
	}
	if len(t.Tags) > 0 {
		data["tags"] = t.Tags
	}
	if d.outcome == OutcomeCreated && model != "" {
		data["embedding_model"], data["embedding_dim"] = model, dim
	}
	return data
}

// rejectedData is indexer.rejected's data for event (type, id) and r.
func rejectedData(eventType, eventID string, r rejection) map[string]any {
	data := map[string]any{
		"reason_code": r.code, "reason": r.reason,
		"event_type": eventType, "event_id": eventID,
	}
	if len(r.details) > 0 {
		data["details"] = r.details
	}
	return data
}
