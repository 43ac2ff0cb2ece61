package mcpserver

import (
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentq/agentq/schemas"
)

// Tool schemas come from the contract (schemas/), so a tool takes and
// gives what the NATS request or event it stands for does, with the
// contract's descriptions, enums and bounds. Two adjustments make them fit
// MCP clients and the models behind them:
//
//   - inputs keep the properties, their constraints and required, and drop
//     the cross-field rules (if/then, anyOf, dependentSchemas): many model
//     APIs refuse those in a function's parameters. The server checks the
//     arguments against the whole contract schema before acting
//     (checkArgs), so the rules still hold, with agentq's wording.
//   - outputs drop the reply's error member: a failure is a tool error,
//     never a result.

// inputSchema is the contract schema name (e.g. agentq.tool.executed.v1)
// as a tool's input schema, with extra properties added.
func inputSchema(name string, extra map[string]any) (*jsonschema.Schema, error) {
	doc, err := contract(name)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"$schema", "$id", "title", "description", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired"} {
		delete(doc, k)
	}
	if len(extra) > 0 {
		props, _ := doc["properties"].(map[string]any)
		for k, v := range extra {
			props[k] = v
		}
	}
	return toSchema(name, doc)
}

// outputSchema is the contract schema of a reply (e.g.
// agentq.search.prompts.response.v1) as a tool's output schema: the reply
// without its error member, requiring required.
func outputSchema(name string, required ...string) (*jsonschema.Schema, error) {
	doc, err := contract(name)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"$schema", "$id", "title", "description", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired"} {
		delete(doc, k)
	}
	if props, ok := doc["properties"].(map[string]any); ok {
		delete(props, "error")
	}
	doc["required"] = required
	if defs, ok := doc["$defs"].(map[string]any); ok {
		delete(defs, "error")
	}
	return toSchema(name, doc)
}

// contract returns a schema document of the contract, decoded.
func contract(name string) (map[string]any, error) {
	raw, err := schemas.Document(name)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("mcpserver: schema %s: %w", name, err)
	}
	return doc, nil
}

func toSchema(name string, doc map[string]any) (*jsonschema.Schema, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: schema %s: %w", name, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("mcpserver: schema %s: %w", name, err)
	}
	return &s, nil
}
